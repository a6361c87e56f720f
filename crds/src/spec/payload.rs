//! How a message body is interpreted before it reaches the sinks.
//!
//! `s3Notification` exists because S3 event notifications carry only object keys; fetching the
//! objects in the reader spares every consumer from doing it. Extended Client pointers exist for
//! the same reason: a producer using the Amazon SQS Extended Client (Java or Python) put the real
//! body in S3, and a consumer wants the body, not the pointer. The fetch bounds live here because
//! an object can be far larger than any SQS message: they are what keeps a reader's memory bounded.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Body format: `raw` (bytes passed through), `json` (must parse as JSON, else the message is a
/// poison message) or `s3Notification` (an S3 event notification; each named object is fetched
/// and delivered). Default `raw`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PayloadFormat {
    // Pass the body through.
    #[default]
    Raw,
    // Require a JSON body.
    Json,
    // Fetch the objects an S3 event names.
    S3Notification,
}

/// Message body handling. Default: raw, Extended Client pointers resolved.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.extendedClient) || !has(self.extendedClient.deleteObjects) || !self.extendedClient.deleteObjects || !has(self.format) || self.format != 's3Notification'")
    .field_path(".extendedClient.deleteObjects")
    .message("spec.payload.extendedClient.deleteObjects does not apply to format s3Notification (its objects are not Extended Client payloads): set it to false"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayloadSpec {
    /// `raw`, `json` or `s3Notification`. Default `raw`.
    #[serde(default)]
    pub format: PayloadFormat,
    /// Where objects are fetched from (S3 notifications and Extended Client pointers). Default:
    /// the AWS endpoint of the reader's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<PayloadS3Spec>,
    /// Largest object fetched, in bytes, 0-4294967296 (4 GiB); a larger one goes to the
    /// dead-letter sink with the reason. Default 67108864 (64 MiB).
    #[serde(default = "default_max_object_bytes")]
    #[schemars(range(max = 4_294_967_296_u64))]
    pub max_object_bytes: u64,
    /// Objects fetched at once per reader pod, 1-256. Default 8.
    #[serde(default = "default_max_concurrent_fetches")]
    #[schemars(range(min = 1, max = 256))]
    pub max_concurrent_fetches: u32,
    /// Bytes of fetched objects a reader pod holds at once (fetching and not yet delivered), at
    /// least the largest object held whole (`maxObjectBytes` while Extended Client pointers are
    /// resolved, else the smaller of `maxObjectBytes` and `streamAboveBytes`), at most
    /// 17179869184 (16 GiB). A streamed object counts one window of 8 MiB (or this whole budget,
    /// if smaller) while a sink reads it. Default 268435456 (256 MiB).
    #[serde(default = "default_max_bytes_in_flight")]
    #[schemars(range(min = 1, max = 17_179_869_184_u64))]
    pub max_bytes_in_flight: u64,
    /// Objects an S3 notification names that are larger than this many bytes, 0-4294967296, are
    /// streamed instead of held whole (Extended Client payloads, which become the message body,
    /// are always fetched whole). At intake the reader only checks such an object (HeadObject:
    /// size, ETag, version; a missing or unreadable object still goes to the dead-letter sink),
    /// and each sink reads it from S3 as it delivers it, pinned to that version and ETag (a retry
    /// reads it again, never a mix of two versions). The `http` sink sends it as a streamed
    /// request body with its Content-Length; the `s3` sink copies it into its output part by
    /// part, as `bodyBase64`. The `sqs` and `log` sinks cannot stream: a streamed object routed to
    /// one of them is rejected, and the dead-letter sink receives the notification with the
    /// reason, not the object. Default 8388608 (8 MiB).
    #[serde(default = "default_stream_above_bytes")]
    #[schemars(range(max = 4_294_967_296_u64))]
    pub stream_above_bytes: u64,
    /// Amazon SQS Extended Client pointers (a body that names an S3 object holding the real
    /// body). Default: resolved.
    #[serde(default)]
    pub extended_client: ExtendedClientSpec,
}

impl Default for PayloadSpec {
    fn default() -> Self {
        Self {
            format: PayloadFormat::Raw,
            s3: None,
            max_object_bytes: default_max_object_bytes(),
            max_concurrent_fetches: default_max_concurrent_fetches(),
            max_bytes_in_flight: default_max_bytes_in_flight(),
            stream_above_bytes: default_stream_above_bytes(),
            extended_client: ExtendedClientSpec::default(),
        }
    }
}

/// The S3 endpoint objects are read from.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayloadS3Spec {
    /// Endpoint override, e.g. `http://127.0.0.1:4566` (an http(s) URL without a path). Absent:
    /// the AWS endpoint of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
    /// AWS region of the buckets, e.g. `us-east-1`. Absent: the default chain's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub region: Option<String>,
    /// Buckets objects may be fetched from, at most 32 names of 3-63 characters. The operator checks each is reachable
    /// with the source's identity; an object in any other bucket goes to the dead-letter sink.
    /// Empty (the default): any bucket the reader's identity can read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 3, max = 63)))]
    pub buckets: Vec<String>,
}

/// What the reader does with an Extended Client pointer.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.deleteObjects) || !self.deleteObjects || !has(self.resolve) || self.resolve")
    .field_path(".deleteObjects")
    .message("spec.payload.extendedClient.deleteObjects needs resolve: true (only objects whose payload the reader fetched are deleted): set resolve to true or deleteObjects to false"))]
pub struct ExtendedClientSpec {
    /// Fetch the object a pointer names and deliver it as the body. Default true.
    #[serde(default = "default_true")]
    pub resolve: bool,
    /// Delete a pointer's S3 object once SQS confirmed its message deleted, as the Extended
    /// Clients do on delete; under exactlyOnce that is after the epoch holding the message
    /// committed. A message whose pointer could not be resolved (dead-lettered, its dead-letter
    /// copy still the pointer) keeps its object. A failed delete is retried a few times, then
    /// logged and counted; it never holds the message back. Needs `s3:DeleteObject` on the
    /// buckets. Default false: the clients delete by default, but an object may be shared with
    /// other consumers of the same message, and a reader that deletes data nobody asked it to is
    /// harder to undo than a bucket lifecycle rule that expires objects.
    #[serde(default)]
    pub delete_objects: bool,
}

impl Default for ExtendedClientSpec {
    fn default() -> Self {
        Self { resolve: true, delete_objects: false }
    }
}

const fn default_true() -> bool {
    true
}

const fn default_max_object_bytes() -> u64 {
    64 * 1024 * 1024
}

const fn default_max_concurrent_fetches() -> u32 {
    8
}

const fn default_max_bytes_in_flight() -> u64 {
    256 * 1024 * 1024
}

const fn default_stream_above_bytes() -> u64 {
    8 * 1024 * 1024
}
