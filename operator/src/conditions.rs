//! The status the reconciler wants: conditions, replica counts and queue figures, computed from
//! what reconcile observed.
//!
//! Why pure: the status is the operator's answer to "is my source working, and if not, what do I
//! change?". Deriving it from plain inputs (validation problems, queue observations, the applied
//! Deployment) makes every message testable, lets the property test drive arbitrary specs through
//! it, and lets reconcile skip the write when nothing changed.
//!
//! Ownership: the reconciler writes only the fields produced here under its field manager: the
//! [`OWNED`] condition types always, and `CheckpointHealthy` while the source has no checkpoints
//! (atLeastOnce), so that every condition type the CRD lists is present with a reason. Under
//! exactlyOnce `CheckpointHealthy` belongs to the checkpoint coordinator; desired replicas and
//! epochs belong to the autoscaler and the coordinator. `Scaling` says whether the autoscaler
//! sizes the readers at all and within which bounds; it is written here because it follows from
//! the spec, and its message carries no live figure so it does not change every interval.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use sluice_crds::{Guarantee, QueueFigures, QueueRedrive, RedrivePolicy, SqsSourceSpec, SqsSourceStatus};

use crate::queue_check::checks::{Finding, Severity, check_queue};
use crate::queue_check::targets::TargetObservation;
use crate::queue_check::{QueueError, QueueObservation};
use crate::validate::{Problem, summarize};
use crate::validate_caveats::caveats;

pub const READY: &str = "Ready";
pub const QUEUE_REACHABLE: &str = "QueueReachable";
pub const QUEUE_CONFIG_VALID: &str = "QueueConfigValid";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
pub const SCALING: &str = "Scaling";
pub const CHECKPOINT_HEALTHY: &str = "CheckpointHealthy";
/// True while a setting works but weakens a guarantee (see `validate_caveats`).
pub const SPEC_WARNINGS: &str = "SpecWarnings";
/// Whether every sink queue, dead-letter queue and bucket the source names exists.
pub const TARGETS_REACHABLE: &str = "TargetsReachable";
/// The condition types this module (and so the reconciler's field manager) always writes.
pub const OWNED: [&str; 8] = [
    READY,
    QUEUE_REACHABLE,
    QUEUE_CONFIG_VALID,
    PROGRESSING,
    DEGRADED,
    SCALING,
    SPEC_WARNINGS,
    TARGETS_REACHABLE,
];

/// What reconcile learned about a source.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// The object does not match the schema at all (written around the CRD's validation).
    Unparseable { error: &'a str },
    /// The spec parsed but cannot run; no children were applied.
    Invalid { problems: &'a [Problem] },
    /// Children were applied; the queues and the other targets were inspected.
    Applied {
        spec: &'a SqsSourceSpec,
        queues: &'a [QueueObservation],
        targets: &'a [TargetObservation],
        deployment: &'a Deployment,
    },
}

/// One condition before timestamps: type, status, reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

impl Verdict {
    fn new(type_: &'static str, status: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self { type_, status, reason: reason.to_owned(), message: message.into() }
    }

    /// Whether this state needs a user's attention (a Warning event when it is entered).
    pub fn is_bad(&self) -> bool {
        match self.type_ {
            DEGRADED | SPEC_WARNINGS => self.status == "True",
            PROGRESSING => self.reason == "ProgressDeadlineExceeded",
            _ => self.status == "False",
        }
    }
}

/// The five conditions, plus replica counts and queue figures, for one outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub verdicts: Vec<Verdict>,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub queue: Option<QueueFigures>,
    /// Each checked queue's redrive policy (`status.queueRedrive`).
    pub queue_redrive: Vec<QueueRedrive>,
    pub last_error: Option<String>,
    /// Queue findings of warning severity (they leave QueueConfigValid True).
    pub warnings: Vec<Finding>,
}

pub fn compute(outcome: Outcome<'_>) -> Computed {
    match outcome {
        Outcome::Unparseable { error } => not_running(
            "SpecUnparseable",
            &format!(
                "the object does not match the SqsSource schema ({error}): fix the field it names and apply again"
            ),
        ),
        Outcome::Invalid { problems } => {
            let reason = problems.first().map_or("SpecInvalid", |p| p.reason);
            not_running(reason, &summarize(problems))
        }
        Outcome::Applied { spec, queues, targets, deployment } => applied(spec, queues, targets, deployment),
    }
}

fn not_running(reason: &str, message: &str) -> Computed {
    let waiting = "waiting for a valid spec";
    Computed {
        verdicts: vec![
            Verdict::new(READY, "False", "SpecInvalid", message),
            Verdict::new(QUEUE_REACHABLE, "Unknown", "SpecInvalid", waiting),
            Verdict::new(QUEUE_CONFIG_VALID, "Unknown", "SpecInvalid", waiting),
            Verdict::new(
                PROGRESSING,
                "False",
                "SpecInvalid",
                "nothing new is rolled out until the spec is valid; readers of the last valid generation, if any, keep running",
            ),
            Verdict::new(DEGRADED, "True", reason, message),
            Verdict::new(SCALING, "Unknown", "SpecInvalid", waiting),
            Verdict::new(SPEC_WARNINGS, "Unknown", "SpecInvalid", waiting),
            Verdict::new(TARGETS_REACHABLE, "Unknown", "SpecInvalid", waiting),
        ],
        replicas: 0,
        ready_replicas: 0,
        queue: None,
        queue_redrive: Vec::new(),
        last_error: Some(message.to_owned()),
        warnings: Vec::new(),
    }
}

fn applied(
    spec: &SqsSourceSpec,
    queues: &[QueueObservation],
    targets: &[TargetObservation],
    deployment: &Deployment,
) -> Computed {
    let reachable = reachability(queues);
    let targets = target_reachability(targets);
    let QueueReview { config, figures, warnings } = review_queues(spec, queues, &reachable);
    let queue_redrive = redrive_of(queues);
    let rollout = Rollout::of(deployment);
    let progressing = rollout.verdict();
    let mut ready = ready(&reachable, &config, &targets, &rollout);
    if spec.suspend && ready.reason == "ScaledToZero" {
        ready = Verdict::new(
            READY,
            "True",
            "Suspended",
            "spec.suspend is true: no reader runs until it is false",
        );
    }
    let degraded = degraded(&reachable, &config, &targets, &rollout, &progressing);
    let last_error = (degraded.status == "True").then(|| degraded.message.clone());
    let replicas = rollout.current;
    let ready_replicas = rollout.ready;
    let mut verdicts =
        vec![ready, reachable, config, progressing, degraded, scaling(spec), spec_warnings(spec), targets];
    verdicts.extend(checkpoint_not_applicable(spec));
    Computed { verdicts, replicas, ready_replicas, queue: figures, queue_redrive, last_error, warnings }
}

/// The redrive policy of every queue that answered, in spec order (an unreadable policy counts
/// as none here; its finding says why).
fn redrive_of(queues: &[QueueObservation]) -> Vec<QueueRedrive> {
    queues
        .iter()
        .filter_map(|q| q.result.as_ref().ok())
        .map(|attrs| match RedrivePolicy::parse(attrs.redrive_policy.as_deref()) {
            Ok(Some(policy)) => policy.status(&attrs.url),
            _ => QueueRedrive { queue: attrs.url.clone(), ..QueueRedrive::default() },
        })
        .collect()
}

/// What the reachable queues' attributes say: `QueueConfigValid`, the summed figures, and the
/// findings of warning severity.
struct QueueReview {
    config: Verdict,
    figures: Option<QueueFigures>,
    warnings: Vec<Finding>,
}

fn review_queues(spec: &SqsSourceSpec, queues: &[QueueObservation], reachable: &Verdict) -> QueueReview {
    let mut findings: Vec<Finding> = Vec::new();
    let mut figures: Option<QueueFigures> = None;
    let mut max_size = 0;
    for q in queues {
        if let Ok(attrs) = &q.result {
            findings.extend(check_queue(spec, q.index, &q.label, attrs));
            let f = figures.get_or_insert_with(QueueFigures::default);
            f.visible = f.visible.saturating_add(attrs.visible);
            f.in_flight = f.in_flight.saturating_add(attrs.in_flight);
            f.delayed = f.delayed.saturating_add(attrs.delayed);
            max_size = max_size.max(attrs.maximum_message_size);
        }
    }
    let (errors, warnings): (Vec<Finding>, Vec<Finding>) =
        findings.into_iter().partition(|f| f.severity == Severity::Error);
    let config = if reachable.status != "True" {
        Verdict::new(
            QUEUE_CONFIG_VALID,
            "Unknown",
            "QueueNotChecked",
            "checked once every queue is reachable",
        )
    } else if let Some(first) = errors.first() {
        Verdict::new(QUEUE_CONFIG_VALID, "False", first.reason, join(&errors))
    } else if let Some(first) = warnings.first() {
        Verdict::new(QUEUE_CONFIG_VALID, "True", first.reason, join(&warnings))
    } else {
        Verdict::new(
            QUEUE_CONFIG_VALID,
            "True",
            "QueueConfigValid",
            format!("queue settings suit the spec; largest message accepted: {max_size} bytes"),
        )
    };
    QueueReview { config, figures, warnings }
}

/// `Ready`: the first blocking problem (queues, their settings, targets), else the readers.
fn ready(reachable: &Verdict, config: &Verdict, targets: &Verdict, rollout: &Rollout) -> Verdict {
    if reachable.status != "True" {
        Verdict::new(READY, "False", "QueueUnreachable", reachable.message.clone())
    } else if config.status == "False" {
        Verdict::new(READY, "False", "QueueConfigInvalid", config.message.clone())
    } else if targets.reason == TARGET_MISSING {
        Verdict::new(READY, "False", TARGET_MISSING, targets.message.clone())
    } else if rollout.desired == 0 {
        Verdict::new(
            READY,
            "True",
            "ScaledToZero",
            "no readers are running; the autoscaler starts one when messages arrive",
        )
    } else if rollout.ready == 0 {
        Verdict::new(
            READY,
            "False",
            "ReadersNotReady",
            format!("0 of {} readers ready: see the reader pods' events and logs", rollout.desired),
        )
    } else {
        Verdict::new(
            READY,
            "True",
            "ReadersReady",
            format!("{} of {} readers ready", rollout.ready, rollout.desired),
        )
    }
}

/// `Degraded`: the first problem that needs a user, or readers missing outside a rollout.
fn degraded(
    reachable: &Verdict,
    config: &Verdict,
    targets: &Verdict,
    rollout: &Rollout,
    progressing: &Verdict,
) -> Verdict {
    if reachable.status != "True" {
        Verdict::new(DEGRADED, "True", &reachable.reason, reachable.message.clone())
    } else if config.status == "False" {
        Verdict::new(DEGRADED, "True", &config.reason, config.message.clone())
    } else if targets.status == "False" {
        Verdict::new(DEGRADED, "True", &targets.reason, targets.message.clone())
    } else if rollout.stuck {
        Verdict::new(DEGRADED, "True", "RolloutStuck", progressing.message.clone())
    } else if rollout.ready < rollout.desired && !rollout.rolling {
        Verdict::new(
            DEGRADED,
            "True",
            "ReadersUnavailable",
            format!(
                "{} of {} readers ready: see the reader pods' events and logs",
                rollout.ready, rollout.desired
            ),
        )
    } else {
        Verdict::new(DEGRADED, "False", "AsExpected", "")
    }
}

const TARGET_MISSING: &str = "TargetDoesNotExist";

/// The sinks' queues and buckets: all there, or each problem naming its field.
fn target_reachability(targets: &[TargetObservation]) -> Verdict {
    if targets.is_empty() {
        return Verdict::new(TARGETS_REACHABLE, "True", "NoTargetsToCheck", "no sqs or s3 sink to check");
    }
    let problems: Vec<String> = targets.iter().filter_map(TargetObservation::problem).collect();
    let first_error = targets.iter().find_map(|t| t.result.as_ref().err());
    match first_error {
        None => Verdict::new(
            TARGETS_REACHABLE,
            "True",
            "TargetsFound",
            format!(
                "found {}",
                targets.iter().map(|t| t.target.field.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ),
        Some(_) => {
            let missing = targets.iter().any(|t| t.result == Err(QueueError::DoesNotExist));
            let denied = targets.iter().any(|t| matches!(t.result, Err(QueueError::Denied(_))));
            let reason = if missing {
                TARGET_MISSING
            } else if denied {
                "TargetAccessDenied"
            } else {
                "TargetCheckFailed"
            };
            Verdict::new(TARGETS_REACHABLE, "False", reason, problems.join("; "))
        }
    }
}

/// Whether the autoscaler sizes the readers, and between which bounds.
fn scaling(spec: &SqsSourceSpec) -> Verdict {
    let (min, max) = (spec.scaling.min_replicas, spec.scaling.max_replicas);
    if spec.suspend {
        Verdict::new(
            SCALING,
            "False",
            "Suspended",
            "spec.suspend is true: the readers are scaled to 0 and the source stands still (lastTransitionTime says since when); set it to false to resume",
        )
    } else if min == max {
        Verdict::new(
            SCALING,
            "False",
            "FixedReplicas",
            format!(
                "spec.scaling.minReplicas equals maxReplicas ({min}): the autoscaler keeps {min} reader(s); raise maxReplicas to scale with the queue"
            ),
        )
    } else {
        Verdict::new(
            SCALING,
            "True",
            "Autoscaling",
            format!(
                "readers are sized from the queue between {min} and {max}; status.desiredReplicas and status.lastScaleReason show the latest decision"
            ),
        )
    }
}

/// Settings that weaken a guarantee: True with the first one's reason and every message.
fn spec_warnings(spec: &SqsSourceSpec) -> Verdict {
    let found = caveats(spec);
    match found.first() {
        Some(first) => Verdict::new(
            SPEC_WARNINGS,
            "True",
            first.reason,
            found.iter().map(|c| c.message.as_str()).collect::<Vec<_>>().join("; "),
        ),
        None => Verdict::new(SPEC_WARNINGS, "False", "NoWarnings", "no setting weakens a guarantee"),
    }
}

/// `CheckpointHealthy` for a source without checkpoints (atLeastOnce); None under exactlyOnce,
/// where the checkpoint coordinator writes it.
pub fn checkpoint_not_applicable(spec: &SqsSourceSpec) -> Option<Verdict> {
    (spec.delivery.guarantee != Guarantee::ExactlyOnce).then(|| {
        Verdict::new(
            CHECKPOINT_HEALTHY,
            "True",
            "NotApplicable",
            "atLeastOnce deletes each message once its sink acknowledged it: there are no checkpoint epochs",
        )
    })
}

fn join(findings: &[Finding]) -> String {
    findings.iter().map(|f| f.message.as_str()).collect::<Vec<_>>().join("; ")
}

fn reachability(queues: &[QueueObservation]) -> Verdict {
    let mut missing = Vec::new();
    let mut denied = Vec::new();
    let mut failed = Vec::new();
    for q in queues {
        match &q.result {
            Ok(_) => {}
            Err(QueueError::DoesNotExist) => missing.push(format!(
                "queue {} (spec.queues[{}]) does not exist: create it, or fix the url or name",
                q.label, q.index
            )),
            Err(QueueError::Denied(why)) => denied.push(format!(
                "queue {} (spec.queues[{}]): {why}: grant the operator's AWS identity sqs:GetQueueAttributes and sqs:GetQueueUrl on it",
                q.label, q.index
            )),
            Err(QueueError::Unavailable(why)) => failed.push(format!(
                "queue {} (spec.queues[{}]) could not be checked: {why}; retrying",
                q.label, q.index
            )),
        }
    }
    let all = [missing.as_slice(), denied.as_slice(), failed.as_slice()].concat().join("; ");
    if !missing.is_empty() {
        Verdict::new(QUEUE_REACHABLE, "False", "QueueDoesNotExist", all)
    } else if !denied.is_empty() {
        Verdict::new(QUEUE_REACHABLE, "False", "QueueAccessDenied", all)
    } else if !failed.is_empty() {
        Verdict::new(QUEUE_REACHABLE, "False", "QueueCheckFailed", all)
    } else {
        Verdict::new(QUEUE_REACHABLE, "True", "QueueFound", format!("{} queue(s) found", queues.len()))
    }
}

/// What of the reader Deployment the conditions read, hashed: a change of the Deployment that
/// leaves this as it was changes no condition (see `deployment_views`).
pub fn rollout_digest(deployment: &Deployment) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&Rollout::of(deployment), &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// The reader Deployment's rollout, as far as the status needs it.
#[derive(Hash)]
struct Rollout {
    desired: i32,
    current: i32,
    ready: i32,
    updated: i32,
    rolling: bool,
    stuck: bool,
}

impl Rollout {
    fn of(deployment: &Deployment) -> Self {
        let desired = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0);
        let status = deployment.status.clone().unwrap_or_default();
        let current = status.replicas.unwrap_or(0);
        let ready = status.ready_replicas.unwrap_or(0);
        let updated = status.updated_replicas.unwrap_or(0);
        let seen = match (deployment.metadata.generation, status.observed_generation) {
            (Some(generation), Some(observed)) => observed >= generation,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let stuck = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded"));
        // At zero replicas with no pod left there is nothing to roll out, whether or not the
        // Deployment controller has seen the latest generation: a new source at `minReplicas: 0`
        // says RolloutComplete at once, and that controller's first status write changes nothing
        // the conditions show (so starts no reconcile: see `deployment_views`).
        let nothing_to_roll = desired == 0 && current == 0;
        let rolling = (!seen && !nothing_to_roll) || updated < desired || current > updated;
        Self { desired, current, ready, updated, rolling, stuck }
    }

    fn verdict(&self) -> Verdict {
        if self.stuck {
            Verdict::new(
                PROGRESSING,
                "False",
                "ProgressDeadlineExceeded",
                "the reader rollout made no progress within its deadline: check the reader pods (image, Secret, probes)",
            )
        } else if self.rolling {
            Verdict::new(
                PROGRESSING,
                "True",
                "RollingOut",
                format!("{} of {} readers updated", self.updated, self.desired),
            )
        } else {
            Verdict::new(
                PROGRESSING,
                "False",
                "RolloutComplete",
                format!("{} readers up to date", self.updated),
            )
        }
    }
}

/// Turns verdicts into conditions, keeping `lastTransitionTime` where the status did not change.
pub fn to_conditions(
    verdicts: &[Verdict],
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    verdicts
        .iter()
        .map(|v| {
            let since = previous
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == v.status)
                .map_or(Time(now), |c| c.last_transition_time.clone());
            Condition {
                type_: v.type_.to_owned(),
                status: v.status.to_owned(),
                reason: v.reason.clone(),
                message: v.message.clone(),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect()
}

/// The status fields the reconciler owns.
pub fn owned_status(
    computed: &Computed,
    previous: Option<&SqsSourceStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> SqsSourceStatus {
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let queue = computed.queue.clone().map(|mut q| {
        q.observed_at = Some(now.to_string());
        q
    });
    SqsSourceStatus {
        observed_generation: generation,
        conditions: to_conditions(&computed.verdicts, previous_conditions, generation, now),
        replicas: computed.replicas,
        ready_replicas: computed.ready_replicas,
        queue,
        queue_redrive: computed.queue_redrive.clone(),
        last_error: computed.last_error.clone(),
        ..SqsSourceStatus::default()
    }
}

/// Whether writing `next` would change what the reconciler owns in `previous` (ignoring times).
/// The condition types compared are those `next` writes: another manager's are not changes.
pub fn differs(previous: Option<&SqsSourceStatus>, next: &SqsSourceStatus) -> bool {
    let Some(previous) = previous else {
        return true;
    };
    let written: Vec<&str> = next.conditions.iter().map(|c| c.type_.as_str()).collect();
    let mine = |s: &SqsSourceStatus| {
        let mut conditions: Vec<_> = s
            .conditions
            .iter()
            .filter(|c| written.contains(&c.type_.as_str()))
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                    c.observed_generation,
                )
            })
            .collect();
        conditions.sort();
        let queue = s.queue.as_ref().map(|q| (q.visible, q.in_flight, q.delayed));
        let redrive = s.queue_redrive.clone();
        (
            s.observed_generation,
            conditions,
            s.replicas,
            s.ready_replicas,
            queue,
            redrive,
            s.last_error.clone(),
        )
    };
    mine(previous) != mine(next)
}

#[cfg(test)]
#[path = "conditions_tests.rs"]
mod tests;
