//! What settling observes going wrong with SQS: visibility extensions and acknowledgements
//! (deletes, releases) that failed. Each `emit` counts it (`reader_errors_total{stage}` with the
//! AWS code) and writes one WARN line per queue and kind per `warnings::WINDOW`, with the count.

use crate::process::events::{Event, Fault};
use crate::process::metrics::{Metrics, queue_name};
use crate::process::warnings::WINDOW;

/// ChangeMessageVisibility (the heartbeat) failed for `entries` messages of `queue_url` with
/// `code`: they may become visible and be received again; the next beat tries again.
pub struct ExtendFailed<'a> {
    pub queue_url: &'a str,
    pub code: &'a str,
    pub entries: u64,
}

impl Event for ExtendFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        for _ in 0..self.entries {
            metrics.fault(Fault::ExtendFailed(self.code.to_owned()));
        }
        let queue = queue_name(self.queue_url);
        if let Some(failures) = metrics.health.warnings().due(queue, "extend_failed") {
            let (code, window) = (self.code, WINDOW.as_secs());
            tracing::warn!(
                queue,
                failures,
                code,
                "extending the visibility of messages of queue {queue} failed ({failures} times in up to {window} s, latest {code}); the next beat tries again, and a message whose visibility lapses is received again"
            );
        }
    }
}

/// An acknowledgement of the acker's `stage` (`delete`, `release`) failed with `code` for
/// `entries` messages of `queue_url`; the acker decides whether to send it again.
pub struct AckFailed<'a> {
    pub stage: &'static str,
    pub queue_url: &'a str,
    pub code: &'a str,
    pub entries: u64,
}

impl Event for AckFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        for _ in 0..self.entries {
            metrics.fault(Fault::Ack { stage: self.stage, code: self.code.to_owned() });
        }
        tracing::debug!(
            stage = self.stage,
            code = self.code,
            entries = self.entries,
            "acknowledgement failed"
        );
    }
}

/// The acker gave `messages` messages of `queue_url` up (`why`: `gave_up` after its attempts,
/// `not_retryable` when SQS called the entry the sender's fault): SQS delivers them again when
/// their visibility lapses.
pub struct AckGivenUp<'a> {
    pub stage: &'static str,
    pub queue_url: &'a str,
    pub why: &'static str,
    pub messages: u64,
}

impl Event for AckGivenUp<'_> {
    fn emit(self, metrics: &Metrics) {
        for _ in 0..self.messages {
            metrics.fault(Fault::Ack { stage: self.stage, code: self.why.to_owned() });
        }
        let queue = queue_name(self.queue_url);
        if let Some(times) = metrics.health.warnings().due(queue, self.why) {
            let why = match self.why {
                "not_retryable" => "SQS called the entries the sender's fault",
                _ => "every attempt failed",
            };
            let (stage, messages, window) = (self.stage, self.messages, WINDOW.as_secs());
            tracing::warn!(
                stage,
                queue,
                messages,
                "{stage} of {messages} messages of queue {queue} given up ({why}; {times} times in up to {window} s); SQS will redeliver them"
            );
        }
    }
}
