//! The queues and targets a source names (sink queues, the dead-letter queue, buckets), as the
//! start finds them: an unreachable queue or a missing target is counted and named in a WARN
//! line, and keeps the reader not ready until it is there.

use std::time::Duration;

use super::{About, Event, Fault, warn};
use crate::process::metrics::Metrics;

/// The source's queues could not be reached at start (`outage` says which and why); the reader
/// stays not ready and connects again after `retry_in`.
pub struct StartUnreachable<'a> {
    pub outage: &'a str,
    pub retry_in: Duration,
}

impl Event for StartUnreachable<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::StartUnreachable);
        let (outage, retry_ms) = (self.outage, self.retry_in.as_millis());
        warn(metrics, About::Reader("start"), "unreachable", |failures, window| {
            format!("{outage} ({failures} in up to {window} s); not ready, trying again in {retry_ms} ms")
        });
    }
}

/// The target at `field` is missing or forbidden; `line` says which and what to do.
pub struct TargetMissing<'a> {
    pub field: &'a str,
    pub line: &'a str,
}

impl Event for TargetMissing<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::warn!(field = %self.field, "{}", self.line);
        metrics.fault(Fault::TargetMissing);
        metrics.health.set_targets_missing(true);
    }
}

/// The target at `field`, missing before, is found.
pub struct TargetFound<'a> {
    pub field: &'a str,
}

impl Event for TargetFound<'_> {
    fn emit(self, _metrics: &Metrics) {
        tracing::info!(field = %self.field, "{}: found", self.field);
    }
}

/// Every target the source names is found: ready as far as the targets go.
pub struct TargetsFound;

impl Event for TargetsFound {
    fn emit(self, metrics: &Metrics) {
        metrics.health.set_targets_missing(false);
        tracing::info!("every target the source names is found");
    }
}
