//! What the dispatcher observes about each sink: a delivery, a failure (the sink's fault) or a
//! rejection (the record's), the dead-letter route's answers. Each `emit` counts it, writes its
//! WARN line (one per sink and kind per `warnings::WINDOW`, with counts), and updates the sink's
//! health and circuit (`process::health`, `sink::circuit`), so that the three always agree.

use crate::process::events::{About, Event, Fault, warn};
use crate::process::metrics::Metrics;
use crate::record::Record;
use crate::sink::circuit::Circuits;

/// One WARN line for `sink` and `kind` if one is due.
fn warn_delivery(metrics: &Metrics, sink: &str, kind: &'static str, reason: &str) {
    warn(metrics, About::Sink(sink), kind, |failures, window| {
        format!("delivery to sink {sink} {kind} ({failures} in up to {window} s): {reason}")
    });
}

/// `sink` acknowledged `record` at `acked_ms`.
pub struct Delivered<'a> {
    pub sink: &'a str,
    pub circuits: &'a Circuits,
    pub record: &'a Record,
    pub acked_ms: i64,
}

impl Event for Delivered<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.delivered_record(self.sink, self.record, self.acked_ms);
        metrics.health.sink_delivered(self.sink);
        self.circuits.succeeded(self.sink, metrics);
    }
}

/// Whose fault a failed delivery was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The sink's: the record is held and delivered again; counts towards the sink's circuit.
    Failed,
    /// The record's: the sink answered, so it is up; the record takes the dead-letter route.
    Rejected,
}

impl FailureKind {
    /// The `kind` label of `sink_errors_total` and the word of the WARN line.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Failed => "failed",
            FailureKind::Rejected => "rejected",
        }
    }
}

/// A delivery to `sink` did not go through, as `kind`, for `reason`.
pub struct DeliveryFailed<'a> {
    pub sink: &'a str,
    pub circuits: &'a Circuits,
    pub kind: FailureKind,
    pub reason: &'a str,
}

impl Event for DeliveryFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        let Self { sink, circuits, kind, reason } = self;
        match kind {
            FailureKind::Rejected => circuits.succeeded(sink, metrics),
            FailureKind::Failed => {
                metrics.health.sink_failed(sink, reason);
                circuits.failed(sink, reason, metrics);
            }
        }
        metrics.sink_error(sink, kind.name());
        warn_delivery(metrics, sink, kind.name(), reason);
    }
}

/// `sink` refused a record for `reason` and nothing settled it (no dead-letter sink, or that
/// failed too): the refusal counts against the sink's health after all.
///
/// Why only then: a sink that refuses a poison record the dead-letter sink then takes is working.
/// Counted as a failure, one poison message followed by a quiet queue would leave the sink
/// "failing" with no success to clear it, and the reader unready.
pub struct RefusalUnsettled<'a> {
    pub sink: &'a str,
    pub reason: &'a str,
}

impl Event for RefusalUnsettled<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.health.sink_failed(self.sink, self.reason);
    }
}

/// A rejected message went back to the queue because the source has no dead-letter sink (the
/// queue's own redrive policy then decides).
pub struct NoDeadLetterSink<'a> {
    pub reason: &'a str,
}

impl Event for NoDeadLetterSink<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::NoDeadLetterSink);
        let reason = self.reason;
        warn(metrics, About::Reader(""), "no_dead_letter_sink", |released, window| {
            format!(
                "{released} rejected messages released in up to {window} s: no deadLetterSink is configured, so they return to the queue until its redrive policy moves them; set spec.deadLetterSink to keep them apart. Latest: {reason}"
            )
        });
    }
}

/// The dead-letter sink `sink` took `record`, rejected for `reason`; `context_left_out`: the
/// reason did not fit within the target's attribute limit.
pub struct DeadLettered<'a> {
    pub sink: &'a str,
    pub record: &'a Record,
    pub reason: &'a str,
    pub context_left_out: bool,
}

impl Event for DeadLettered<'_> {
    fn emit(self, metrics: &Metrics) {
        let record = self.record;
        metrics.health.sink_delivered(self.sink);
        tracing::info!(message_id = %record.message_id, traceparent = record.trace.as_deref(), reason = %self.reason, "dead-lettered");
        metrics.dead_lettered(&record.queue_url);
        if self.context_left_out {
            metrics.fault(Fault::DeadLetterReasonLeftOut);
        }
    }
}

/// The dead-letter sink `sink` did not take a record, for `reason`: the record is held.
pub struct DeadLetterFailed<'a> {
    pub sink: &'a str,
    pub reason: &'a str,
}

impl Event for DeadLetterFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.health.sink_failed(self.sink, self.reason);
        warn_delivery(metrics, self.sink, "dead_letter_failed", self.reason);
        metrics.fault(Fault::DeadLetterFailed);
    }
}

/// A record whose object is streamed is refused for `sink`, which cannot stream objects, before
/// any delivery (the sink was not asked, so neither its counts nor its circuit change).
pub struct ObjectRefused<'a> {
    pub sink: &'a str,
    pub reason: &'a str,
}

impl Event for ObjectRefused<'_> {
    fn emit(self, metrics: &Metrics) {
        warn_delivery(metrics, self.sink, FailureKind::Rejected.name(), self.reason);
    }
}
