//! One typed value per fault the reader counts in `reader_errors_total{stage,error_type}`.
//!
//! Why a type and not two strings at each call site: the label pair is spelled once, here, so a
//! dashboard or alert that names one finds it in one place, and a new fault is a new variant the
//! compiler makes every `match` consider. The events (`process::events::Event`) count through
//! it beside their WARN lines; a fault with nothing more to say is emitted as it is.

use std::borrow::Cow;

use crate::process::health::ApiCall;

/// A fault worth counting, with what its labels need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// ReceiveMessage failed with this AWS error code.
    ReceiveFailed(String),
    /// ReceiveMessage got no answer within its time limit.
    ReceiveTimeout,
    /// SQS returned a message without an id or a receipt handle.
    MessageWithoutIdOrReceipt,
    /// A body the payload format cannot decode (the message is dead-lettered).
    InvalidPayload,
    /// An object a message names cannot be read (the message is dead-lettered).
    UnreadableObject,
    /// A fetch from S3 failed for S3's fault (the message is held and fetched again).
    FetchFailed,
    /// A redelivery could not be classified against the leases (the API failed).
    ClassifyFailed,
    /// A redelivery recorded in an epoch not yet decided (left invisible).
    Undecided,
    /// A sink failed or rejected a record (`kind`: the sink's failure kind).
    Delivery(&'static str),
    /// A sink panicked; its messages are released.
    DeliveryPanicked,
    /// A message held for a sink's fault nearly reached SQS's 12 h visibility cap.
    HeldPastVisibilityCap,
    /// A rejected record with no dead-letter sink to take it.
    NoDeadLetterSink,
    /// The rejection reason did not fit within the dead-letter target's attribute limit.
    DeadLetterReasonLeftOut,
    /// The dead-letter sink failed.
    DeadLetterFailed,
    /// A transactional sink's epoch step failed (`step`: pre_commit, commit or abort).
    CheckpointStep(&'static str),
    /// ChangeMessageVisibility (the heartbeat) failed with this code.
    ExtendFailed(String),
    /// A DeleteMessageBatch or ChangeMessageVisibilityBatch entry (`stage`: the acker's call)
    /// failed with this code, or was given up (`not_retryable`, `gave_up`).
    Ack { stage: &'static str, code: String },
    /// A queue could not be reached at start.
    StartUnreachable,
    /// A target the source names (sink queue, dead-letter queue, bucket) is missing at start.
    TargetMissing,
    /// A write to the Kubernetes API failed (its report or its lease renewal).
    ApiCallFailed(ApiCall),
}

impl Fault {
    /// The `stage` and `error_type` labels.
    pub fn labels(&self) -> (&'static str, Cow<'static, str>) {
        let fixed = |stage, kind: &'static str| (stage, Cow::Borrowed(kind));
        match self {
            Fault::ReceiveFailed(code) => ("receive", Cow::Owned(code.clone())),
            Fault::ReceiveTimeout => fixed("receive", "timeout"),
            Fault::MessageWithoutIdOrReceipt => fixed("receive", "message_without_id_or_receipt"),
            Fault::InvalidPayload => fixed("decode", "invalid_payload"),
            Fault::UnreadableObject => fixed("payload", "unreadable_object"),
            Fault::FetchFailed => fixed("payload", "fetch_failed"),
            Fault::ClassifyFailed => fixed("classify", "api"),
            Fault::Undecided => fixed("classify", "undecided"),
            Fault::Delivery(kind) => fixed("deliver", kind),
            Fault::DeliveryPanicked => fixed("deliver", "panic"),
            Fault::HeldPastVisibilityCap => fixed("deliver", "held_past_visibility_cap"),
            Fault::NoDeadLetterSink => fixed("dead_letter", "no_dead_letter_sink"),
            Fault::DeadLetterReasonLeftOut => fixed("dead_letter", "reason_left_out_at_attribute_limit"),
            Fault::DeadLetterFailed => fixed("dead_letter", "failed"),
            Fault::CheckpointStep(step) => fixed("checkpoint", step),
            Fault::ExtendFailed(code) => ("extend", Cow::Owned(code.clone())),
            Fault::Ack { stage, code } => (stage, Cow::Owned(code.clone())),
            Fault::StartUnreachable => fixed("start", "unreachable"),
            Fault::TargetMissing => fixed("start", "target_missing"),
            Fault::ApiCallFailed(write) => fixed("kubernetes_api", write.as_str()),
        }
    }
}
