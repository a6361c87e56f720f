//! Is the queue there, and does it suit the spec?
//!
//! Why a trait: reconcile must be testable without a network, and one source's slow or broken
//! AWS endpoint must not turn into an operator error. The AWS call (`sqs.rs`) only fetches
//! attributes; every judgement about them is pure (`checks.rs`) and table-tested. A failed call
//! becomes a condition on that source and a shorter requeue, never a reconcile error.

pub mod checks;
pub mod payload_buckets;
pub mod s3;
pub mod sqs;
pub mod targets;

use futures::future::BoxFuture;
use sluice_crds::{Credentials, QueueRef, SqsSourceSpec};

/// The attributes of one queue that the checks and the status need.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct QueueAttributes {
    /// The queue URL (resolved from name + region when the spec gives a name).
    pub url: String,
    pub fifo: bool,
    pub visibility_timeout_seconds: i64,
    /// The raw `RedrivePolicy` JSON, if the queue has one.
    pub redrive_policy: Option<String>,
    pub maximum_message_size: i64,
    pub visible: i64,
    pub in_flight: i64,
    pub delayed: i64,
    /// `KmsMasterKeyId`: the customer-managed key (id, ARN or alias) encrypting the queue, if any.
    pub kms_master_key_id: Option<String>,
}

/// Why a queue could not be inspected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("the queue does not exist")]
    DoesNotExist,
    #[error("access denied: {0}")]
    Denied(String),
    #[error("{0}")]
    Unavailable(String),
}

/// Fetches a queue's attributes, and checks the other targets a source names. Implementations
/// must not panic and should bound their time.
pub trait QueueInspector: targets::TargetInspector + Send + Sync {
    fn inspect<'a>(&'a self, queue: &'a QueueRef) -> BoxFuture<'a, Result<QueueAttributes, QueueError>>;

    /// The same with the identity a source's credentials name (`crate::identity`); by default the
    /// inspector's own.
    fn inspect_as<'a>(
        &'a self,
        queue: &'a QueueRef,
        _credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<QueueAttributes, QueueError>> {
        self.inspect(queue)
    }
}

/// What was learned about one entry of `spec.queues`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueObservation {
    pub index: usize,
    /// How the spec names the queue (url, or name), for messages.
    pub label: String,
    pub result: Result<QueueAttributes, QueueError>,
}

/// How the spec names a queue, for messages.
pub fn queue_label(queue: &QueueRef) -> String {
    queue.url.clone().or_else(|| queue.name.clone()).unwrap_or_else(|| "(unnamed queue)".to_owned())
}

/// Inspects every queue of the spec, one after the other (sources have few queues).
pub async fn inspect_all(inspector: &dyn QueueInspector, spec: &SqsSourceSpec) -> Vec<QueueObservation> {
    let mut observations = Vec::with_capacity(spec.queues.len());
    for (index, queue) in spec.queues.iter().enumerate() {
        observations.push(QueueObservation {
            index,
            label: queue_label(queue),
            result: inspector.inspect_as(queue, &spec.credentials).await,
        });
    }
    observations
}
