//! Where delivered messages go.
//!
//! A sink is one entry with a name and exactly one kind block, rather than a tagged enum, because
//! Kubernetes structural schemas cannot express Rust enums with data; the CEL rule restores the
//! "exactly one kind" invariant the enum would have given.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One destination: a unique `name` and exactly one of `http`, `sqs`, `s3`, `log`, optionally
/// restricted by `route` to some messages.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.http) ? 1 : 0) + (has(self.sqs) ? 1 : 0) + (has(self.s3) ? 1 : 0) + (has(self.log) ? 1 : 0) == 1")
    .message("each sink (spec.sinks[], spec.deadLetterSink) needs exactly one of http, sqs, s3 or log: keep one kind block per sink and split the others into sinks of their own"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SinkSpec {
    /// Sink name, unique among the source's sinks (dead-letter sink included); a DNS label of 1-63
    /// lowercase letters, digits and `-`, used in metrics and logs. Required.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("sink name must be a DNS label (lowercase letters, digits and -, starting and ending with a letter or digit): rename the sink"))]
    pub name: String,
    /// POST each message to an HTTP endpoint as a CloudEvent (binary mode). No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSinkSpec>,
    /// Forward each message to another SQS queue. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs: Option<SqsSinkSpec>,
    /// Write messages to S3, one object per reader and checkpoint epoch, committed with the epoch.
    /// No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3SinkSpec>,
    /// Log each message to the reader's stderr (testing and debugging). No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSinkSpec>,
    /// Deliver only messages whose message attribute matches. Absent: every message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteSpec>,
}

/// HTTP sink: one POST per message, CloudEvents binary mode (or batches of events, `batch`); the
/// event id (`ce-id`) is the SQS MessageId, an idempotency key that lets the receiver drop
/// redeliveries.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpSinkSpec {
    /// Target URL, http or https. Required.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+([/?#].*)?$')")
        .message("spec.sinks[].http.url must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/events: fix the scheme or host"))]
    pub url: String,
    /// Per-request timeout in milliseconds, 1-600000. Default 5000.
    #[serde(default = "default_http_timeout_ms")]
    #[schemars(range(min = 1, max = 600_000))]
    pub timeout_ms: u64,
    /// Requests in flight per reader pod, 1-1024. Default 32.
    #[serde(default = "default_http_concurrency")]
    #[schemars(range(min = 1, max = 1024))]
    pub concurrency: u32,
    /// Extra request headers (name to value), at most 32, each value at most 4096 characters.
    /// The value is written in the readers' ConfigMap, readable by anyone who may read
    /// ConfigMaps, so headers that carry credentials are refused here (compared case-insensitively):
    /// `Authorization`, `Proxy-Authorization`, `X-Api-Key`, `Api-Key`, `X-Auth-Token`, `Cookie`.
    /// Put those in a Secret and name them in `secretRefs.headers`. Default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    #[x_kube(validation = Rule::new("self.all(h, !(h.lowerAscii() in ['authorization', 'proxy-authorization', 'x-api-key', 'api-key', 'x-auth-token', 'cookie']))")
        .message("spec.sinks[].http.headers sets a credential header inline (Authorization, Proxy-Authorization, X-Api-Key, Api-Key, X-Auth-Token or Cookie), where every reader of the source's ConfigMap can read it: put the value in a Secret and name it in spec.sinks[].http.secretRefs.headers instead"))]
    pub headers: BTreeMap<String, String>,
    /// Header values (tokens) and a CA bundle from Secrets, never inline. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_refs: Option<super::sink_secrets::HttpSecretRefs>,
    /// CloudEvents `ce-type` (1-256 characters). Default `dev.sluice.sqs.message`.
    #[serde(default = "default_event_type")]
    #[schemars(length(min = 1, max = 256))]
    pub event_type: String,
    /// Send events in batches: one POST of `application/cloudevents-batch+json` (a JSON array
    /// of structured-mode CloudEvents) carries up to `maxEvents`. The receiver answers 2xx for
    /// all, or names the failed events in `{"batchItemFailures":[{"itemIdentifier":"<id>"}]}`
    /// (docs/http-batch.md). Absent: one binary-mode POST per message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<HttpBatchSpec>,
}

/// How events are gathered into one batch request. A batch goes when it holds `maxEvents`, when
/// the next event would take it past `maxBytes`, or `maxWaitMilliseconds` after its first event.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpBatchSpec {
    /// Most events in one request, 1-100. Default 10.
    #[serde(default = "default_batch_max_events")]
    #[schemars(range(min = 1, max = 100))]
    pub max_events: u32,
    /// Most bytes in one request body (the JSON array), 1 KiB to 16 MiB. An event larger than
    /// this on its own goes alone. Default 1048576 (1 MiB).
    #[serde(default = "default_batch_max_bytes")]
    #[schemars(range(min = 1024, max = 16_777_216))]
    pub max_bytes: u64,
    /// How long the first event of a batch waits for more, in milliseconds, 0-10000 (0: send
    /// what is there at once). Default 50.
    #[serde(default = "default_batch_max_wait_milliseconds")]
    #[schemars(range(min = 0, max = 10_000))]
    pub max_wait_milliseconds: u32,
}

impl Default for HttpBatchSpec {
    fn default() -> Self {
        Self {
            max_events: default_batch_max_events(),
            max_bytes: default_batch_max_bytes(),
            max_wait_milliseconds: default_batch_max_wait_milliseconds(),
        }
    }
}

const fn default_batch_max_events() -> u32 {
    10
}
const fn default_batch_max_bytes() -> u64 {
    1 << 20
}
const fn default_batch_max_wait_milliseconds() -> u32 {
    50
}

/// SQS sink: forward each message (body and message attributes) to another queue. On a FIFO
/// queue the deduplication id is the source MessageId, so a redelivered message is dropped by SQS.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.messageGroupId) || self.queueUrl.endsWith('.fifo')")
    .field_path(".messageGroupId")
    .message("spec.sinks[].sqs.messageGroupId applies only to FIFO queues (queueUrl ending in .fifo): remove messageGroupId or point queueUrl at a FIFO queue"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsSinkSpec {
    /// Target queue URL, in the same form as `spec.queues[].url`. Required.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+/([^?#]*/)?[A-Za-z0-9_-]{1,80}([.]fifo)?$')")
        .message("spec.sinks[].sqs.queueUrl must look like https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (or http://127.0.0.1:4566/queue/REGION/ACCOUNT/NAME on LocalStack): fix the scheme, host or queue name"))]
    pub queue_url: String,
    /// Endpoint override, e.g. `http://127.0.0.1:4566` (an http(s) URL without a path). Absent:
    /// the AWS endpoint of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+/?$')")
        .message("spec.sinks[].sqs.endpoint must be an http(s) URL with a host and no path, e.g. http://127.0.0.1:4566: remove the path or fix the scheme"))]
    pub endpoint: Option<String>,
    /// AWS region of the target queue, e.g. `us-east-1`. Absent: read from `queueUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')")
        .message("spec.sinks[].sqs.region must be an AWS region code such as us-east-1: fix the spelling"))]
    pub region: Option<String>,
    /// FIFO only: MessageGroupId for forwarded messages (1-128 characters). Absent: the source
    /// message's own group id; messages of a standard queue (no order to keep) are spread over 16
    /// groups `<sink name>-00` to `-15` by their MessageId, so the target's consumers can work in
    /// parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub message_group_id: Option<String>,
    /// Bodies over a threshold are written to S3 and the message carries a pointer to them, in
    /// the Amazon SQS Extended Client's format (Java and Python clients read it). Absent: bodies
    /// are sent as they are (SQS refuses those over 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<SqsOffloadSpec>,
}

/// Where the `sqs` sink puts bodies too large to send, and from what size.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsOffloadSpec {
    /// Bucket the bodies are written to (object key: the source MessageId). Required.
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')")
        .message("spec.sinks[].sqs.offload.bucket must be a valid S3 bucket name (3-63 lowercase letters, digits, . and -): rename it"))]
    pub bucket: String,
    /// Bodies (with their attributes) larger than this many bytes are offloaded, 0-1048576 (SQS's
    /// largest message since 2025). Default 262144 (256 KiB), kept below that largest size on
    /// purpose: it is still the Extended Client libraries' own threshold; it fits a sink queue
    /// whose `MaximumMessageSize` was set to 262144 before the limit rose; and it is cheaper
    /// above roughly 430 KiB, since SQS bills each 64 KiB chunk of a send and of a receive as
    /// one request while an offloaded body costs one S3 PUT and one GET whatever its size. Raise
    /// it (up to the sink queue's `MaximumMessageSize`) to keep bodies in SQS.
    #[serde(default = "default_offload_threshold")]
    #[schemars(range(max = 1_048_576))]
    pub threshold_bytes: u64,
    /// S3 endpoint override, e.g. `http://127.0.0.1:4566`. Absent: the sink's `endpoint`, else
    /// the AWS endpoint of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
}

const fn default_offload_threshold() -> u64 {
    262_144
}

/// S3 sink: transactional per checkpoint epoch (a multipart upload completed when the epoch
/// commits), so it can take part in exactlyOnce. Cannot be a dead-letter sink.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3SinkSpec {
    /// Bucket name: 3-63 lowercase letters, digits, `.` and `-`. Required.
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')")
        .message("spec.sinks[].s3.bucket must be a valid S3 bucket name (3-63 lowercase letters, digits, . and -, starting and ending with a letter or digit): rename it"))]
    pub bucket: String,
    /// Key prefix for written objects, at most 512 characters, e.g. `orders/`. Default empty.
    #[serde(default)]
    #[schemars(length(max = 512))]
    pub prefix: String,
    /// Endpoint override, e.g. `http://127.0.0.1:4566` (an http(s) URL without a path). Absent:
    /// the AWS endpoint of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+/?$')")
        .message("spec.sinks[].s3.endpoint must be an http(s) URL with a host and no path, e.g. http://127.0.0.1:4566: remove the path or fix the scheme"))]
    pub endpoint: Option<String>,
    /// AWS region of the bucket, e.g. `us-east-1`. Absent: the default chain's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')")
        .message("spec.sinks[].s3.region must be an AWS region code such as us-east-1: fix the spelling"))]
    pub region: Option<String>,
    /// KMS key for server-side encryption (SSE-KMS) of written objects: a key id, key ARN, alias
    /// name (`alias/NAME`) or alias ARN, at most 2048 characters. Absent: the bucket's default
    /// encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key|alias)/.+|alias/[A-Za-z0-9/_-]+|(mrk-)?[0-9a-f-]{32,36})$')")
        .message("spec.sinks[].s3.sseKmsKeyId must be a KMS key id, key ARN, alias/NAME or alias ARN: copy it from the KMS console"))]
    pub sse_kms_key_id: Option<String>,
    /// When records become an object: whichever hint is reached first. Under atLeastOnce records
    /// are buffered per partition (`keyTemplate`) and written as one object, and each message is
    /// deleted only after the object holding it is written; under exactlyOnce the epoch stays the
    /// unit and the hints split a large epoch into several objects committed together. Default
    /// `{maxBytes: 8388608, maxRecords: 1000, maxSeconds: 30}`.
    #[serde(default)]
    pub buffer: S3BufferSpec,
    /// `none` (default), `gzip` (`.jsonl.gz`, `Content-Encoding: gzip`) or `zstd` (`.jsonl.zst`,
    /// `Content-Encoding: zstd`). Objects are compressed as they are written, part by part.
    #[serde(default)]
    pub compression: S3Compression,
    /// Time partitions between `prefix` and the object's name, at most 256 characters: literal
    /// path text (letters, digits, `_ = . -`, `/` between segments) and the placeholders `{yyyy}`,
    /// `{MM}`, `{dd}`, `{HH}` (UTC), e.g. `{yyyy}/{MM}/{dd}/{HH}` or Hive-style
    /// `dt={yyyy}-{MM}-{dd}/hour={HH}`. The clock is `keyTime`. Default empty (no partitions).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new(r"self.matches('^([A-Za-z0-9_=.-]+|[{](yyyy|MM|dd|HH)[}])+(/([A-Za-z0-9_=.-]+|[{](yyyy|MM|dd|HH)[}])+)*$') && !self.contains('..')")
        .message("spec.sinks[].s3.keyTemplate must be path segments of letters, digits, _ = . - and the placeholders {yyyy} {MM} {dd} {HH}, separated by single /, without a leading or trailing / or '..', e.g. dt={yyyy}-{MM}-{dd}/hour={HH}: fix the template"))]
    pub key_template: String,
    /// The clock `keyTemplate` reads: `sentTimestamp` (default: when the message was sent to SQS,
    /// so a redelivery lands in the same partition) or `deliveryTime` (when the reader writes it).
    #[serde(default)]
    pub key_time: S3KeyTime,
}

/// Hints for when buffered records become an object (the first one reached wins).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3BufferSpec {
    /// Uncompressed bytes of JSON lines per object, 1 KiB to 64 MiB (never more than
    /// `spec.receive.held.maxBytes`, which bounds what a reader holds). Default 8388608 (8 MiB).
    #[serde(default = "default_s3_buffer_bytes")]
    #[schemars(range(min = 1024, max = 67_108_864))]
    pub max_bytes: u64,
    /// Records per object, 1-100000 (never more than `spec.receive.held.maxMessages`: the reader
    /// clamps to it and says so once). Default 1000, the default of that bound.
    #[serde(default = "default_s3_buffer_records")]
    #[schemars(range(min = 1, max = 100_000))]
    pub max_records: u32,
    /// Seconds the first record of an object waits at most before it is written, 1-900. Default
    /// 30. A SIGTERM drain writes what is buffered at once.
    #[serde(default = "default_s3_buffer_seconds")]
    #[schemars(range(min = 1, max = 900))]
    pub max_seconds: u32,
}

const fn default_s3_buffer_bytes() -> u64 {
    8 << 20
}
const fn default_s3_buffer_records() -> u32 {
    1000
}
const fn default_s3_buffer_seconds() -> u32 {
    30
}

impl Default for S3BufferSpec {
    fn default() -> Self {
        Self {
            max_bytes: default_s3_buffer_bytes(),
            max_records: default_s3_buffer_records(),
            max_seconds: default_s3_buffer_seconds(),
        }
    }
}

/// How the s3 sink compresses objects.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum S3Compression {
    // JSON lines as they are (`.jsonl`).
    #[default]
    None,
    // gzip (`.jsonl.gz`).
    Gzip,
    // zstd (`.jsonl.zst`).
    Zstd,
}

/// The clock of an s3 sink's `keyTemplate`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum S3KeyTime {
    // The message's SentTimestamp.
    #[default]
    SentTimestamp,
    // When the reader writes the record.
    DeliveryTime,
}

/// Log sink: one log line per message. Not idempotent, so not allowed with exactlyOnce.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogSinkSpec {
    /// Log the body too, not only the metadata. Default false.
    #[serde(default)]
    pub body: bool,
}

/// Attribute routing: the sink gets a message only when its String message attribute
/// `attribute` equals one of `values`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    /// SQS message attribute name (1-256 characters). Required.
    #[schemars(length(min = 1, max = 256))]
    pub attribute: String,
    /// Attribute values that select this sink: 1-64 strings of at most 256 characters. Required.
    #[schemars(length(min = 1, max = 64), inner(length(max = 256)))]
    pub values: Vec<String>,
}

fn default_http_timeout_ms() -> u64 {
    5000
}
fn default_http_concurrency() -> u32 {
    32
}
fn default_event_type() -> String {
    "dev.sluice.sqs.message".into()
}
