//! Which Kubernetes Events a reconcile publishes.
//!
//! Why only on change: an Event is for a person reading `kubectl describe`; a reconcile that runs
//! every minute and finds nothing new must say nothing. So events follow a new generation (the
//! spec was applied, or each of its problems) and condition transitions into a bad state, into a
//! warning, and back out of one. Deciding that is pure; publishing is best-effort, since a lost
//! Event must never fail a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use sluice_crds::SqsSourceStatus;

use crate::access::ApiCall;
use crate::conditions::{
    Computed, PROGRESSING, QUEUE_CONFIG_VALID, QUEUE_REACHABLE, SPEC_WARNINGS, TARGETS_REACHABLE, Verdict,
};
use crate::validate::Problem;

/// The Recorder creates an Event, and patches it when the same one recurs.
pub const API_CALLS: &[ApiCall] =
    &[ApiCall::new("events.k8s.io", "events", "create"), ApiCall::new("events.k8s.io", "events", "patch")];

const ACTION: &str = "Reconcile";

/// One Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

impl Notice {
    fn new(warning: bool, reason: &str, note: impl Into<String>) -> Self {
        Self { warning, reason: reason.to_owned(), note: note.into() }
    }
}

/// What happened in this reconcile that a person should hear about.
pub struct Happened<'a> {
    pub previous: Option<&'a SqsSourceStatus>,
    pub generation: Option<i64>,
    pub computed: &'a Computed,
    /// Problems of an invalid spec (empty when it was valid).
    pub problems: &'a [Problem],
    /// The applied configuration hash (None when nothing was applied).
    pub config_hash: Option<&'a str>,
}

pub fn notices(h: &Happened<'_>) -> Vec<Notice> {
    let mut out = Vec::new();
    let new_generation =
        h.previous.and_then(|s| s.observed_generation) != h.generation || h.previous.is_none();
    if new_generation {
        for problem in h.problems {
            out.push(Notice::new(true, problem.reason, problem.message.clone()));
        }
        if let Some(hash) = h.config_hash {
            let generation = h.generation.map_or_else(|| "?".to_owned(), |g| g.to_string());
            out.push(Notice::new(
                false,
                "ConfigApplied",
                format!("applied generation {generation}; reader configuration hash {hash}"),
            ));
        }
    }
    let previous: &[_] = h.previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    // Ready and Degraded summarize the others; announcing them too would say everything twice.
    let causes = [QUEUE_REACHABLE, QUEUE_CONFIG_VALID, PROGRESSING, SPEC_WARNINGS, TARGETS_REACHABLE];
    for verdict in h.computed.verdicts.iter().filter(|v| causes.contains(&v.type_)) {
        let before = previous.iter().find(|c| c.type_ == verdict.type_);
        let changed = before.is_none_or(|c| c.status != verdict.status || c.reason != verdict.reason);
        if !changed || (!h.problems.is_empty() && new_generation) {
            continue;
        }
        let was_bad = before.is_some_and(|c| {
            verdict_of(&c.type_, &c.status, &c.reason).is_bad()
                || h.computed.warnings.iter().any(|w| w.reason == c.reason)
        });
        let is_warning = h.computed.warnings.iter().any(|w| w.reason == verdict.reason);
        if verdict.is_bad() || is_warning {
            out.push(Notice::new(true, &verdict.reason, verdict.message.clone()));
        } else if was_bad {
            out.push(Notice::new(false, &verdict.reason, format!("{}: {}", verdict.type_, verdict.message)));
        }
    }
    out
}

fn verdict_of(type_: &str, status: &str, reason: &str) -> Verdict {
    let written = crate::conditions::OWNED.iter().chain([crate::conditions::CHECKPOINT_HEALTHY].iter());
    let type_ = written.copied().find(|t| *t == type_).unwrap_or("Unknown");
    let status = match status {
        "True" => "True",
        "False" => "False",
        _ => "Unknown",
    };
    Verdict { type_, status, reason: reason.to_owned(), message: String::new() }
}

/// Publishes notices; failures are logged, never returned.
pub async fn publish(recorder: &Recorder, regarding: &ObjectReference, notices: &[Notice]) {
    for notice in notices {
        let event = Event {
            type_: if notice.warning { EventType::Warning } else { EventType::Normal },
            reason: notice.reason.clone(),
            note: Some(truncate(&notice.note, 1000)),
            action: ACTION.to_owned(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, regarding).await {
            tracing::warn!(reason = %notice.reason, error = %e, "could not publish event");
        }
    }
}

/// Events notes are limited to 1 kB.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
