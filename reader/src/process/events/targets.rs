//! The targets a source names (sink queues, the dead-letter queue, buckets), as the start check
//! finds them: a missing one is counted, named in a WARN line with its field, and keeps the reader
//! not ready until every one is found.

use super::{Event, Fault};
use crate::process::metrics::Metrics;

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
