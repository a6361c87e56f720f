//! One typed value per thing worth observing, each with an `emit` that counts it, writes its
//! rate-limited WARN line and updates the health it affects, in one call.
//!
//! Why: a call site that counts, logs and updates health by itself forgets one of the three, or
//! words the line its own way; an event spells the metric's labels, the line and the health change
//! once, and a new one is a new type. The events of the bottom layer are here (receiving, the
//! targets a source names, what `Fault` only counts); the stages keep theirs beside what they
//! observe (`deliver::events`, `payload::events`, `sink::circuit`), because the layering rule
//! keeps a stage's names out of this layer.

mod fault;
pub mod receive;
pub mod targets;

pub use fault::Fault;

use super::metrics::Metrics;

/// Something observable: [`Event::emit`] counts it, logs it (rate-limited where it repeats) and
/// updates the reader's health (`Metrics::health`) as it affects it.
pub trait Event {
    fn emit(self, metrics: &Metrics);
}

/// Every event that only counts (its line, if any, is written where more is known).
impl Event for Fault {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(self);
    }
}
