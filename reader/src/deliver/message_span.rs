//! One span per traced message and sink, made only while spans are exported over OTLP.
//!
//! Why per message: the batch's `deliver` span covers many messages from many producers' traces,
//! so it can be no one's child; a message that carried a `traceparent` gets a span of its own
//! whose parent is the producer's span, and the producer's trace shows the delivery. Without
//! export (or without trace context) no span is made: the hot path pays one atomic load.

use std::sync::Arc;

use tracing::Span;
use tracing::field::Empty;

use crate::record::Record;
use crate::sink::Outcome;

/// By position in `records`: a span for each traced record, while spans are exported.
pub fn open(records: &[Arc<Record>], sink: &str) -> Vec<Option<Span>> {
    if !sluice_logs::exporting() {
        return Vec::new();
    }
    records
        .iter()
        .map(|record| {
            let traceparent = record.trace.as_deref()?;
            let span = tracing::info_span!("deliver_message", sink, message_id = %record.message_id, outcome = Empty);
            sluice_logs::continue_trace(&span, traceparent);
            Some(span)
        })
        .collect()
}

/// Record how the delivery of the `k`th record ended; the span ends when dropped.
pub fn close(spans: &[Option<Span>], k: usize, outcome: &Outcome) {
    if let Some(span) = spans.get(k).and_then(Option::as_ref) {
        let name = match outcome {
            Outcome::Delivered => "delivered",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Failed { .. } => "failed",
            Outcome::Redeliver { .. } => "redeliver",
            Outcome::NotStarted => "not_started",
        };
        span.record("outcome", name);
    }
}
