//! The `SqsSource` custom resource: what a user asks for.
//!
//! Field names, types and serde shapes are the contract shared by the operator, the reader and
//! the tests. Every doc comment becomes the schema description `kubectl explain` shows, so each
//! one states the default and the bounds. Rules that span several fields live here as CEL (run by
//! the apiserver and, through `validate`, by the standalone reader and the local control plane);
//! rules about one sub-object live beside that sub-object in the submodules.

mod credentials;
mod delivery;
mod embedded_bounds;
mod filter;
mod held;
mod payload;
mod pod_resources;
mod queue;
mod reader;
mod receive;
mod replay;
mod scaling;
mod scaling_fallback;
mod service_account;
mod sink;
mod sink_secrets;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use self::credentials::{CredentialSource, Credentials, SecretCredentialsRef};
pub use self::delivery::{DeliverySpec, Fairness, Guarantee, RetrySpec, RetryStrategy};
pub use self::filter::{FilterErrorFate, FilterFate, FilterSpec};
pub use self::held::HeldSpec;
pub use self::payload::{ExtendedClientSpec, PayloadFormat, PayloadS3Spec, PayloadSpec};
pub use self::queue::QueueRef;
pub use self::reader::{ReaderResources, ReaderServiceAccount, ReaderSpec, ResourceAmounts};
pub use self::receive::{RateLimitSpec, ReceiveSpec};
pub use self::replay::ReplaySpec;
pub use self::scaling::ScalingSpec;
pub use self::scaling_fallback::{DEFAULT_FALLBACK_REPLICAS, FallbackBehavior, FallbackSpec};
pub use self::sink::{
    HttpBatchSpec, HttpSinkSpec, LogSinkSpec, RouteSpec, S3SinkSpec, SinkSpec, SqsOffloadSpec, SqsSinkSpec,
};
pub use self::sink::{S3BufferSpec, S3Compression, S3KeyTime};
pub use self::sink_secrets::{HttpSecretRefs, SecretHeader, SecretKeyRef};
use crate::status::SqsSourceStatus;

/// Desired state of an SqsSource: the queues to read, how to deliver what is read, and how many
/// readers to run.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "SqsSource",
    namespaced,
    shortname = "sqss",
    category = "sluice",
    status = "SqsSourceStatus",
    doc = "An SqsSource reads one or more Amazon SQS queues with a scaled Deployment of reader pods and delivers each message to its sinks, at least once or exactly once.",
    cel,
    printcolumn = r#"{"name":"Depth","type":"integer","jsonPath":".status.queue.visible","description":"Visible messages in the source's queues"}"#,
    printcolumn = r#"{"name":"Readers","type":"integer","jsonPath":".status.readyReplicas","description":"Reader pods that are ready"}"#,
    printcolumn = r#"{"name":"Guarantee","type":"string","jsonPath":".spec.delivery.guarantee","description":"Delivery guarantee"}"#,
    printcolumn = r#"{"name":"Held","type":"integer","jsonPath":".status.held.messages","description":"Messages the readers hold: received, not yet settled"}"#,
    printcolumn = r#"{"name":"Committed","type":"integer","jsonPath":".status.committedEpoch","description":"Last committed checkpoint epoch"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"The Ready condition"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = Rule::new("self.delivery.guarantee != 'exactlyOnce' || self.sinks.all(s, has(s.s3) || has(s.http) || (has(s.sqs) && s.sqs.queueUrl.endsWith('.fifo')))")
        .field_path(".sinks")
        .message("with spec.delivery.guarantee exactlyOnce every sink in spec.sinks must be able to take part in checkpoints (s3, http, or sqs to a FIFO queue whose url ends in .fifo): remove log sinks and standard-queue sqs sinks, or use guarantee atLeastOnce"),
    validation = Rule::new("self.sinks.all(s, !has(s.sqs) || !self.queues.exists(q, has(q.url) && q.url == s.sqs.queueUrl && (has(q.endpoint) ? q.endpoint : '') == (has(s.sqs.endpoint) ? s.sqs.endpoint : '')))")
        .field_path(".sinks")
        .message("spec.sinks[].sqs.queueUrl is one of the source's own queues (spec.queues[].url): every forwarded message would be received and forwarded again without end; point the sink at another queue"),
    validation = Rule::new("!has(self.deadLetterSink) || !has(self.deadLetterSink.sqs) || !self.queues.exists(q, has(q.url) && q.url == self.deadLetterSink.sqs.queueUrl && (has(q.endpoint) ? q.endpoint : '') == (has(self.deadLetterSink.sqs.endpoint) ? self.deadLetterSink.sqs.endpoint : ''))")
        .field_path(".deadLetterSink.sqs.queueUrl")
        .message("spec.deadLetterSink.sqs.queueUrl is one of the source's own queues (spec.queues[].url): every dead letter would be received and failed again without end; point it at another queue"),
    validation = Rule::new("!has(self.deadLetterSink) || self.sinks.all(s, s.name != self.deadLetterSink.name)")
        .field_path(".deadLetterSink.name")
        .reason(Reason::FieldValueDuplicate)
        .message("spec.deadLetterSink.name must differ from every name in spec.sinks: rename the dead-letter sink"),
    validation = Rule::new("!has(self.filter) || !has(self.filter.routeTo) || self.sinks.exists(s, s.name == self.filter.routeTo)")
        .field_path(".filter.routeTo")
        .reason(Reason::FieldValueInvalid)
        .message("spec.filter.routeTo names no sink in spec.sinks: use the name of one of spec.sinks[].name"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsSourceSpec {
    /// SQS queues to read, 1-16 entries, all FIFO or all standard. Required.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.all(q, (has(q.url) && q.url.endsWith('.fifo')) || (has(q.name) && q.name.endsWith('.fifo'))) || self.all(q, !((has(q.url) && q.url.endsWith('.fifo')) || (has(q.name) && q.name.endsWith('.fifo'))))")
        .message("spec.queues mixes FIFO queues (ending in .fifo) and standard queues: their ordering and deduplication differ, so split them into two SqsSources"))]
    pub queues: Vec<QueueRef>,
    /// AWS credentials: default chain, an assumed role, or a Secret. Default: the default chain.
    #[serde(default)]
    pub credentials: Credentials,
    /// ReceiveMessage settings. Default: 10 messages, 20 s long poll, at least 4 pollers per pod.
    #[serde(default)]
    pub receive: ReceiveSpec,
    /// Throughput cap for the whole source. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,
    /// Delivery guarantee, checkpoint interval, retries. Default: at-least-once.
    #[serde(default)]
    pub delivery: DeliverySpec,
    /// Destinations, 1-16 entries with unique names; every message goes to every sink whose
    /// `route` matches (all sinks without a route). Required.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))")
        .reason(Reason::FieldValueDuplicate)
        .message("spec.sinks[].name must be unique: rename the sinks that share a name"))]
    pub sinks: Vec<SinkSpec>,
    /// Where poison messages go (with the failure reason) after the last retry, then are deleted
    /// from the queue. Any sink kind but s3, without `route`. Absent: nothing is dead-lettered
    /// (see `delivery.failOnError`). Every message attribute of the user's is kept with its type
    /// (SQS allows 10 a message); the reason goes beside them as `sluice-dlq-reason`,
    /// `sluice-source-message-id` and `sluice-source-queue` when there is room for three, as one
    /// JSON attribute `sluice-dead-letter` (`reason`, `sourceMessageId`, `sourceQueue`) when
    /// there is room for one, and is left out (only the reader's log line has it) when the
    /// message already has 10 attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("!has(self.s3)")
            .field_path(".s3")
            .message("spec.deadLetterSink cannot be s3 (s3 writes only at checkpoint commits, dead letters are written at once): use an sqs, http or log dead-letter sink"),
        validation = Rule::new("!has(self.route)")
            .field_path(".route")
            .message("spec.deadLetterSink takes every poison message, so it cannot have a route: remove spec.deadLetterSink.route")
    )]
    pub dead_letter_sink: Option<SinkSpec>,
    /// How message bodies are interpreted. Default: raw.
    #[serde(default)]
    pub payload: PayloadSpec,
    /// Reader replica autoscaling. Default: 1 to 10 replicas.
    #[serde(default)]
    pub scaling: ScalingSpec,
    /// Pause the source without deleting it: true scales the readers to 0 (each drains: it stops
    /// receiving, finishes or releases what it holds and, under exactlyOnce, has its open epoch
    /// committed or aborted as in a scale to zero); the autoscaler and the checkpoint coordinator
    /// then stand still, and `status.conditions` Scaling says Suspended since when. Status,
    /// leases and checkpoint are kept; false resumes from the committed checkpoint, with what
    /// waited in the queue. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Reader pod settings: image, log level, grace period, resources, placement, pod metadata,
    /// extra environment and the ServiceAccount. Default: the operator's own image.
    #[serde(default)]
    pub reader: ReaderSpec,
    /// A replay of the dead letters back through the source, acted on once per `id`; progress
    /// in `status.replay`. Absent: nothing is replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplaySpec>,
    /// Take only the messages a CEL expression over their attributes and body matches, and say
    /// what becomes of the others (delete, release or route). Absent: every message is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterSpec>,
}
