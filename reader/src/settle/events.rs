//! What settling observes going wrong: visibility extensions and acknowledgements (deletes,
//! releases) that failed, messages held to SQS's visibility cap, a sink that panicked, and a
//! transactional sink's epoch step that failed. Each `emit` counts it
//! (`reader_errors_total{stage}`, with the AWS code where there is one) and writes its line
//! (WARN lines that repeat: one per queue, sink or step and kind per `warnings::WINDOW`, with the
//! count; `process::events::warn`).

use sluice_protocol::EpochKey;

use crate::process::events::{About, Event, Fault, warn};
use crate::process::metrics::{Metrics, queue_name};
use crate::sink::circuit::Circuits;
use crate::sink::{EpochStep, SinkError};

/// ChangeMessageVisibility (the heartbeat) failed for `entries` messages of `queue_url` with
/// `code`: they may become visible and be received again; the next beat tries again.
pub struct ExtendFailed<'a> {
    pub queue_url: &'a str,
    pub code: &'a str,
    pub entries: u64,
}

impl Event for ExtendFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.faults(Fault::ExtendFailed(self.code.to_owned()), self.entries);
        let (queue, code) = (queue_name(self.queue_url), self.code);
        warn(metrics, About::Queue(queue), "extend_failed", |failures, window| {
            format!(
                "extending the visibility of messages of queue {queue} failed ({failures} times in up to {window} s, latest {code}); the next beat tries again, and a message whose visibility lapses is received again"
            )
        });
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
        metrics.faults(Fault::Ack { stage: self.stage, code: self.code.to_owned() }, self.entries);
        let (stage, code, entries) = (self.stage, self.code, self.entries);
        tracing::debug!(stage, code, entries, "acknowledgement failed");
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
        metrics.faults(Fault::Ack { stage: self.stage, code: self.why.to_owned() }, self.messages);
        let (stage, queue, messages) = (self.stage, queue_name(self.queue_url), self.messages);
        let why = match self.why {
            "not_retryable" => "SQS called the entries the sender's fault",
            _ => "every attempt failed",
        };
        warn(metrics, About::Queue(queue), self.why, |times, window| {
            format!(
                "{stage} of {messages} messages of queue {queue} given up ({why}; {times} times in up to {window} s); SQS will redeliver them"
            )
        });
    }
}

/// `messages` messages held for a sink's fault nearly reached SQS's 12 h visibility cap since
/// their receive (`aws::visibility::HOLD_LIMIT`): they are handed back to the queue.
pub struct HeldPastVisibilityCap {
    pub messages: usize,
}

impl Event for HeldPastVisibilityCap {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::HeldPastVisibilityCap);
        let messages = self.messages;
        warn(metrics, About::Reader("held"), "visibility_cap", |times, window| {
            format!(
                "{messages} messages held for nearly SQS's 12 h visibility cap since the receive: handing back ({times} times in up to {window} s)"
            )
        });
    }
}

/// A sink panicked while delivering; the `messages` not yet settled are released. An ERROR line
/// each time: a panic is a bug to report, never a condition to rate-limit.
pub struct DeliveryPanicked {
    pub messages: usize,
}

impl Event for DeliveryPanicked {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::DeliveryPanicked);
        tracing::error!(messages = self.messages, "a sink panicked; releasing its messages");
    }
}

/// A transactional sink's `step` for `key` failed with `error` and is retried: counted under
/// `checkpoint`, a WARN line, and (a pre-commit or commit that cannot be made is the sink's
/// fault) a failure of the sink's circuit, so receiving pauses while the epoch's messages stay
/// held. An abort's failure only leaves staged output behind, so the circuit does not count it.
pub struct EpochStepFailed<'a> {
    pub key: &'a EpochKey,
    pub step: EpochStep,
    pub error: &'a SinkError,
    pub circuits: &'a Circuits,
}

impl Event for EpochStepFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        let Self { key, step, error, circuits } = self;
        metrics.fault(Fault::CheckpointStep(step.name()));
        if step != EpochStep::Abort {
            circuits.failed(&error.sink, &error.message, metrics);
        }
        warn(metrics, About::Sink(&error.sink), step.name(), |failures, window| {
            let (step, epoch, pod) = (step.name(), key.epoch, &key.pod);
            format!(
                "{step} of epoch {epoch} of reader {pod} failed ({failures} in up to {window} s), retrying: {error}"
            )
        });
    }
}
