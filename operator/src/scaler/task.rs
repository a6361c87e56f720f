//! One source's scaling loop: every `pollIntervalSeconds` (`idlePollIntervalSeconds` while idle,
//! see `cadence`), read the inputs, decide, apply.
//!
//! Why one loop per source: a source's interval comes from its own spec, and a slow queue endpoint
//! or API call must delay only its own source. Each interval makes one GetQueueAttributes call per
//! queue, whatever the replica count; the Deployment and the readers' leases come from caches
//! shared by every loop (`children`), so an idle interval makes no API call.
//!
//! Order of writes when replicas change: scaling up, the readers' `replicas` figure is published
//! before the Deployment grows, so running readers shrink their share of the rate limit before new
//! ones take theirs; scaling down, the Deployment shrinks first, since leaving readers stop
//! receiving at once. Either way the source-wide limit is never exceeded by the change.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use sluice_crds::SqsSource;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::apply::{self, ScaleStatus};
use super::attributes::{AttributesError, QueueAttributes, source_figures};
use super::blind;
use super::cadence;
use super::children::Children;
use super::decision::{Decision, Observation, decide};
use super::drain::{DrainRate, drain_rate};
use super::fallback::Blindness;
use super::history::History;
use super::metrics::{Metrics, SourceLabels};
use super::suspend;
use crate::names::{SCALER_FIELD_MANAGER, checkpoint_name, reader_name};
use crate::own_writes::OwnWrites;
use crate::source_cache::SourceCache;

/// Shared by every source's loop.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub queues: Arc<dyn QueueAttributes>,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// Intervals in progress at once, across every source (by default [`TICKS_AT_ONCE`]).
    pub ticks: Arc<Semaphore>,
    /// The reader Deployments and leases, as last watched.
    pub children: Children,
    /// Where the replica changes are recorded, so their watch events start no reconcile.
    pub own_writes: OwnWrites,
}

/// How many sources' intervals run at once by default (`--scaler-intervals-at-once`). Why a bound: an operator started beside a thousand
/// sources starts a thousand loops together, each making its API calls and a GetQueueAttributes
/// at once; the API server's priority and fairness then answers the operator's own flow with 429s,
/// its leader Lease renewal among them (a real run lost the Lease that way and the operator
/// exited). An interval takes tens of milliseconds, so this many at a time still reads a thousand
/// sources within a few seconds.
pub const TICKS_AT_ONCE: u16 = 16;

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error("cannot read the queue: {0}")]
    Queue(#[from] AttributesError),
    #[error("{}", crate::error::kube_line(.0))]
    Kube(#[from] kube::Error),
    #[error("the SqsSource has no namespace or uid yet")]
    Incomplete,
}

/// What one loop remembers between intervals.
#[derive(Debug, Default)]
pub struct SourceState {
    pub(super) history: Option<History>,
    pub(super) last_scale: Option<(String, String)>,
    pub(super) status_written: Option<ScaleStatus>,
    replicas_published: Option<i32>,
    /// Whether the source was suspended at the last interval; `None` before the first.
    pub(super) suspended: Option<bool>,
    /// Queue reads failed in a row up to the last interval; `None` after a good one.
    pub(super) blindness: Option<Blindness>,
    /// Whether the fallback applied at the last interval; `None` before the first (then the
    /// status says).
    pub(super) fallback_applied: Option<bool>,
}

/// The result of one interval.
#[derive(Debug, PartialEq)]
pub enum Tick {
    /// The reconciler has not created `<source>-reader` yet.
    NoDeployment,
    Decided {
        current: i32,
        decision: Decision,
    },
    /// `spec.suspend` is true: replicas held at 0, nothing decided.
    Suspended,
}

fn labels_of(source: &SqsSource) -> SourceLabels {
    SourceLabels { namespace: source.namespace().unwrap_or_default(), source: source.name_any() }
}

/// One interval for one source, at `now`: read the inputs, decide, then write in order the
/// replicas, the status and the event.
pub async fn tick(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    now: Timestamp,
) -> Result<Tick, TickError> {
    let namespace = source.namespace().ok_or(TickError::Incomplete)?;
    let name = source.name_any();
    let spec = &source.spec;

    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    if spec.suspend {
        state.blindness = None;
        return suspend::hold(ctx, source, state, &deployments, now).await;
    }
    suspend::resume(ctx, source, state).await;
    // The Deployment first: until the reconciler has made it there is nothing to size, and no
    // reason to spend a GetQueueAttributes.
    let Some(deployment) = ctx.children.deployment(&namespace, &name) else {
        return Ok(Tick::NoDeployment);
    };
    let figures = source_figures(ctx.queues.as_ref(), &spec.queues, &spec.credentials);
    let figures = match crate::aws_requests::for_source(&namespace, &name, figures).await {
        Ok(figures) => figures,
        Err(error) => {
            // The read's failure is this interval's error; the fallback's own writes, if they
            // fail, are retried at the next interval and said here.
            if let Err(fallback) = blind::interval(ctx, source, state, &deployments, &error, now).await {
                tracing::warn!(error = %fallback, "cannot apply spec.scaling.fallback this interval (retried at the next)");
            }
            return Err(error.into());
        }
    };
    let sized = sized_by_scaler(&deployment);
    let current = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    blind::seeing(ctx, source, state).await;
    let drain = read_drain(ctx, &namespace, &name, now);

    let history = state.history.take().unwrap_or_else(|| History::on_first_sight(sized, now, current));
    let rate_limit = spec.rate_limit.as_ref().and_then(|r| r.messages_per_second).map(f64::from);
    let seen = Observation {
        figures: figures.clone(),
        current,
        drain_per_replica: drain.per_replica,
        fleet_drain: drain.total,
        age_seconds: max_of(drain.oldest_age_seconds, drain.delivery_wait_p99_seconds),
        rate_limit,
        now,
    };
    let decision = decide(&spec.scaling, &seen, history);
    state.history = Some(decision.history.clone());
    ctx.metrics.observe(&labels_of(source), &figures, drain.per_replica, current, &decision);
    ctx.metrics.age(&labels_of(source), seen.age_seconds);

    let change = Change { current, desired: decision.desired, reason: &decision.reason };
    apply_replicas(ctx, source, state, &deployments, change, now).await?;
    let scale = ScaleStatus {
        desired: decision.desired,
        figures,
        drain_total: drain.total,
        last_scale: None,
        fallback: None,
    };
    write_status(ctx, source, state, scale, now).await?;
    blind::write_condition(ctx, source, &blind::seeing_verdict(&spec.scaling)).await?;
    if decision.changes(current) {
        announce(ctx, source, current, &decision).await;
    }
    Ok(Tick::Decided { current, decision })
}

/// Whether the scaler has written the Deployment's replicas before (its field manager is listed).
fn sized_by_scaler(deployment: &Deployment) -> bool {
    let managers = deployment.metadata.managed_fields.iter().flatten();
    managers.into_iter().any(|f| f.manager.as_deref() == Some(SCALER_FIELD_MANAGER))
}

fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The source's drain rate from its readers' lease ConfigMaps.
fn read_drain(ctx: &Context, namespace: &str, name: &str, now: Timestamp) -> DrainRate {
    let leases = ctx.children.leases(namespace, name);
    let empty = Default::default();
    drain_rate(leases.iter().map(|cm| cm.data.as_ref().unwrap_or(&empty)), now.as_millisecond())
}

/// A replica count to write: from `current` to `desired`, and why (for the log and
/// `status.lastScaleReason`).
pub(super) struct Change<'a> {
    pub current: i32,
    pub desired: i32,
    pub reason: &'a (dyn std::fmt::Display + Sync),
}

/// Writes the `desired` replica count, with the readers' `replicas` figure (when the source has a
/// rate limit) published before a scale-up and after a scale-down (see the module doc); with no
/// change, publishes the figure if it was not yet.
pub(super) async fn apply_replicas(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    deployments: &Api<Deployment>,
    change: Change<'_>,
    now: Timestamp,
) -> Result<(), TickError> {
    let Change { current, desired, reason } = change;
    let publish = source.spec.rate_limit.is_some();
    if desired == current {
        if publish && state.replicas_published != Some(current) {
            publish_replicas(ctx, source, state, current).await?;
        }
        return Ok(());
    }
    let up = desired > current;
    if up && publish {
        publish_replicas(ctx, source, state, desired).await?;
    }
    let name = source.name_any();
    let params = PatchParams { field_manager: Some(SCALER_FIELD_MANAGER.to_owned()), ..Default::default() };
    let body = apply::deployment_replicas(desired);
    let answer = deployments.patch(&reader_name(&name), &params, &Patch::Merge(&body)).await?;
    ctx.own_writes.wrote(&answer);
    if !up && publish {
        publish_replicas(ctx, source, state, desired).await?;
    }
    let namespace = source.namespace().unwrap_or_default();
    tracing::info!(%namespace, source = %name, from = current, to = desired, %reason, "scaled readers");
    state.last_scale = Some((now.to_string(), reason.to_string()));
    Ok(())
}

/// Applies the scaler's status fields when they differ from what this loop last wrote. `scale`
/// comes without `last_scale`: that is the loop's memory, seeded from the object's status on the
/// first write.
pub(super) async fn write_status(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    mut scale: ScaleStatus,
    now: Timestamp,
) -> Result<(), TickError> {
    if state.status_written.is_none() {
        // An apply that omits a field this manager owned deletes it: carry over what is there.
        let status = source.status.as_ref();
        if let Some((time, reason)) =
            status.and_then(|s| s.last_scale_time.clone().zip(s.last_scale_reason.clone()))
        {
            state.last_scale.get_or_insert((time, reason));
        }
    }
    scale.last_scale = state.last_scale.clone();
    if state.status_written.as_ref().is_none_or(|before| scale.differs_from(before)) {
        let namespace = source.namespace().ok_or(TickError::Incomplete)?;
        let sources: Api<SqsSource> = Api::namespaced(ctx.client.clone(), &namespace);
        let params = PatchParams::apply(SCALER_FIELD_MANAGER).force();
        let body = apply::status(&scale, &now.to_string());
        sources.patch_status(&source.name_any(), &params, &Patch::Apply(&body)).await?;
        state.status_written = Some(scale);
    }
    Ok(())
}

/// A Normal event for a change of replicas whose reason has one.
async fn announce(ctx: &Context, source: &SqsSource, current: i32, decision: &Decision) {
    let Some(reason) = decision.reason.event_reason() else { return };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(format!("{} -> {} replicas: {}", current, decision.desired, decision.reason)),
        action: "Scale".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &source.object_ref(&())).await {
        // The scale happened; a lost Event must not make the next interval redo it.
        let (namespace, name) = (source.namespace().unwrap_or_default(), source.name_any());
        tracing::warn!(%namespace, source = %name, %error, "cannot publish scale event");
    }
}

async fn publish_replicas(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    replicas: i32,
) -> Result<(), TickError> {
    let namespace = source.namespace().ok_or(TickError::Incomplete)?;
    let owner = source.controller_owner_ref(&()).ok_or(TickError::Incomplete)?;
    let name = source.name_any();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams::apply(SCALER_FIELD_MANAGER).force();
    let body = apply::checkpoint_replicas(&name, replicas, &owner);
    config_maps.patch(&checkpoint_name(&name), &params, &Patch::Apply(&body)).await?;
    state.replicas_published = Some(replicas);
    Ok(())
}

/// Runs `key`'s loop until the source is gone from `sources` or `shutdown` fires.
#[tracing::instrument(name = "scaler", skip_all, fields(
    source = %key.name,
    namespace = %key.namespace.as_deref().unwrap_or_default(),
))]
pub async fn run_source(
    ctx: Context,
    sources: SourceCache,
    key: ObjectRef<SqsSource>,
    shutdown: CancellationToken,
) {
    let mut state = SourceState::default();
    let mut labels = None;
    let mut missing = 0;
    // Before the caches' first list every source would look as if it had no Deployment.
    tokio::select! {
        () = shutdown.cancelled() => return,
        ready = ctx.children.ready() => if !ready { return },
    }
    while let Some(source) = sources.get(&key) {
        let started = tokio::time::Instant::now();
        let source_labels = labels_of(&source);
        let outcome = {
            // Closed only when the operator stops, which ends this loop as well.
            let Ok(_turn) = ctx.ticks.acquire().await else { return };
            tick(&ctx, &source, &mut state, Timestamp::now()).await
        };
        // The scaler is blind while this fails (SluiceScalerBlind in deploy/observability/).
        ctx.metrics.queue_read(&source_labels, matches!(outcome, Err(TickError::Queue(_))));
        ctx.metrics.suspended(&source_labels, source.spec.suspend);
        missing = if matches!(outcome, Ok(Tick::NoDeployment)) { missing + 1 } else { 0 };
        let interval = cadence::next_interval(&source.spec.scaling, outcome.as_ref().ok(), missing);
        match outcome {
            Ok(Tick::NoDeployment) => {
                tracing::debug!("reader deployment not there yet");
            }
            Ok(Tick::Decided { .. } | Tick::Suspended) => {}
            // The source or its Deployment went away between the watch and this tick: the loop
            // ends once the cache drops the source; nothing failed.
            Err(TickError::Kube(kube::Error::Api(status))) if status.code == 404 => {
                tracing::debug!("source or reader deployment gone");
            }
            Err(error) => {
                ctx.metrics.poll_failed(&source_labels);
                tracing::warn!(%error, "no scaling decision this interval");
            }
        }
        labels = Some(source_labels);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(started + interval) => {}
        }
    }
    if let Some(labels) = labels {
        ctx.metrics.forget(&labels);
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
