//! The `SqsSource` custom resource: what a user asks for.
//!
//! CONTRACT SKELETON: field names, types and serde shapes here are the API shared by the
//! operator, the reader and the tests. Docs, defaults, bounds and CEL rules are filled in by
//! the crds work; changing a field's name or type needs every user updated in the same change.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::status::SqsSourceStatus;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "SqsSource",
    namespaced,
    shortname = "sqss",
    status = "SqsSourceStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsSourceSpec {
    pub queues: Vec<QueueRef>,
    #[serde(default)]
    pub credentials: Credentials,
    #[serde(default)]
    pub receive: ReceiveSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,
    #[serde(default)]
    pub delivery: DeliverySpec,
    pub sinks: Vec<SinkSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_sink: Option<SinkSpec>,
    #[serde(default)]
    pub payload: PayloadSpec,
    #[serde(default)]
    pub scaling: ScalingSpec,
    #[serde(default)]
    pub reader: ReaderSpec,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueRef {
    /// Either `url`, or `name` + `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint override (LocalStack), e.g. `http://127.0.0.1:4566`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Share of pollers given to this queue when there are several. Default 1.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum CredentialSource {
    #[default]
    DefaultChain,
    AssumeRole,
    Secret,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credentials {
    #[serde(default)]
    pub source: CredentialSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretCredentialsRef>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretCredentialsRef {
    pub name: String,
    /// Default `AWS_ACCESS_KEY_ID`.
    #[serde(default = "default_access_key_id_key")]
    pub access_key_id_key: String,
    /// Default `AWS_SECRET_ACCESS_KEY`.
    #[serde(default = "default_secret_access_key_key")]
    pub secret_access_key_key: String,
    /// Optional; default `AWS_SESSION_TOKEN` if present in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_key: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiveSpec {
    /// 1-10, default 10.
    #[serde(default = "default_max_messages")]
    pub max_messages: i32,
    /// 0-20, default 20.
    #[serde(default = "default_wait_time_seconds")]
    pub wait_time_seconds: i32,
    /// 0-43200; absent means the queue's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_timeout_seconds: Option<i32>,
    /// Concurrent long-poll loops per reader pod, 1-64, default 4.
    #[serde(default = "default_pollers")]
    pub pollers: i32,
    /// Default `["All"]`.
    #[serde(default = "default_all")]
    pub attribute_names: Vec<String>,
    /// Default `["All"]`.
    #[serde(default = "default_all")]
    pub message_attribute_names: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitSpec {
    /// For the whole source; the operator divides it among replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<u64>,
    /// Bucket size as a number of seconds' worth of the rate, default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_seconds: Option<u32>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Guarantee {
    #[default]
    AtLeastOnce,
    ExactlyOnce,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliverySpec {
    #[serde(default)]
    pub guarantee: Guarantee,
    /// Epoch length for exactlyOnce; required there. 1-3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_seconds: Option<i32>,
    /// Stop the reader (non-zero exit, nothing undelivered deleted) instead of dead-lettering.
    #[serde(default)]
    pub fail_on_error: bool,
    #[serde(default)]
    pub retry: RetrySpec,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RetryStrategy {
    Fixed,
    #[default]
    Exponential,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetrySpec {
    #[serde(default)]
    pub strategy: RetryStrategy,
    /// Attempts in all, including the first. Default 5.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Default 100.
    #[serde(default = "default_initial_delay_ms")]
    pub initial_delay_ms: u64,
    /// Default 10000.
    #[serde(default = "default_max_delay_ms")]
    pub max_delay_ms: u64,
    /// Give up after this long whatever the attempts. Default 60.
    #[serde(default = "default_max_elapsed_seconds")]
    pub max_elapsed_seconds: u64,
    /// Default true.
    #[serde(default = "default_true")]
    pub jitter: bool,
    /// HTTP statuses that are retried (connect errors and timeouts always are).
    /// Default [408, 429, 500, 502, 503, 504].
    #[serde(default = "default_retryable_status_codes")]
    pub retryable_status_codes: Vec<u16>,
}

/// Exactly one of `http`, `sqs`, `s3`, `log`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SinkSpec {
    /// Unique among the sinks; used in metrics and logs.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSinkSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs: Option<SqsSinkSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3SinkSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSinkSpec>,
    /// Absent: every message. Present: only messages whose attribute matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteSpec>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpSinkSpec {
    pub url: String,
    /// Default 5000.
    #[serde(default = "default_http_timeout_ms")]
    pub timeout_ms: u64,
    /// Requests in flight per reader pod. Default 32.
    #[serde(default = "default_http_concurrency")]
    pub concurrency: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// CloudEvents `ce-type`. Default `dev.sluice.sqs.message`.
    #[serde(default = "default_event_type")]
    pub event_type: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsSinkSpec {
    pub queue_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3SinkSpec {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogSinkSpec {
    /// Log the body too, not only the metadata. Default false.
    #[serde(default)]
    pub body: bool,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    /// SQS message attribute name.
    pub attribute: String,
    /// String values that select this sink.
    pub values: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PayloadFormat {
    #[default]
    Raw,
    Json,
    S3Notification,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayloadSpec {
    #[serde(default)]
    pub format: PayloadFormat,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingSpec {
    /// 0 allowed. Default 1.
    #[serde(default = "default_min_replicas")]
    pub min_replicas: i32,
    /// Default 10.
    #[serde(default = "default_max_replicas")]
    pub max_replicas: i32,
    /// Backlog one replica is expected to hold. Default 100.
    #[serde(default = "default_target_per_replica")]
    pub target_messages_per_replica: i64,
    /// Backlog above which 0 replicas become 1. Default 0.
    #[serde(default)]
    pub activation_threshold: i64,
    /// Count ApproximateNumberOfMessagesNotVisible. Default true.
    #[serde(default = "default_true")]
    pub count_in_flight: bool,
    /// Count ApproximateNumberOfMessagesDelayed. Default false.
    #[serde(default)]
    pub count_delayed: bool,
    /// Backlog should be cleared within this at the measured drain rate. Default 60.
    #[serde(default = "default_target_drain_seconds")]
    pub target_drain_seconds: i32,
    /// Most replicas added in one decision. Default 10.
    #[serde(default = "default_scale_up_max_step")]
    pub scale_up_max_step: i32,
    /// Default 60.
    #[serde(default = "default_scale_down_stabilization_seconds")]
    pub scale_down_stabilization_seconds: i32,
    /// Idle time before scaling to zero (min 0 only). Default 60.
    #[serde(default = "default_idle_cooldown_seconds")]
    pub idle_cooldown_seconds: i32,
    /// GetQueueAttributes interval. Default 5.
    #[serde(default = "default_poll_interval_seconds")]
    pub poll_interval_seconds: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReaderSpec {
    /// Reader image; default the operator's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `RUST_LOG` filter. Default `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// Default: sized from receive/delivery settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

fn default_weight() -> u32 {
    1
}
fn default_access_key_id_key() -> String {
    "AWS_ACCESS_KEY_ID".into()
}
fn default_secret_access_key_key() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}
fn default_max_messages() -> i32 {
    10
}
fn default_wait_time_seconds() -> i32 {
    20
}
fn default_pollers() -> i32 {
    4
}
fn default_all() -> Vec<String> {
    vec!["All".into()]
}
fn default_max_attempts() -> u32 {
    5
}
fn default_initial_delay_ms() -> u64 {
    100
}
fn default_max_delay_ms() -> u64 {
    10_000
}
fn default_max_elapsed_seconds() -> u64 {
    60
}
fn default_true() -> bool {
    true
}
fn default_retryable_status_codes() -> Vec<u16> {
    vec![408, 429, 500, 502, 503, 504]
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
fn default_min_replicas() -> i32 {
    1
}
fn default_max_replicas() -> i32 {
    10
}
fn default_target_per_replica() -> i64 {
    100
}
fn default_target_drain_seconds() -> i32 {
    60
}
fn default_scale_up_max_step() -> i32 {
    10
}
fn default_scale_down_stabilization_seconds() -> i32 {
    60
}
fn default_idle_cooldown_seconds() -> i32 {
    60
}
fn default_poll_interval_seconds() -> i32 {
    5
}

impl Default for ReceiveSpec {
    fn default() -> Self {
        Self {
            max_messages: default_max_messages(),
            wait_time_seconds: default_wait_time_seconds(),
            visibility_timeout_seconds: None,
            pollers: default_pollers(),
            attribute_names: default_all(),
            message_attribute_names: default_all(),
        }
    }
}

impl Default for DeliverySpec {
    fn default() -> Self {
        Self {
            guarantee: Guarantee::default(),
            checkpoint_interval_seconds: None,
            fail_on_error: false,
            retry: RetrySpec::default(),
        }
    }
}

impl Default for RetrySpec {
    fn default() -> Self {
        Self {
            strategy: RetryStrategy::default(),
            max_attempts: default_max_attempts(),
            initial_delay_ms: default_initial_delay_ms(),
            max_delay_ms: default_max_delay_ms(),
            max_elapsed_seconds: default_max_elapsed_seconds(),
            jitter: true,
            retryable_status_codes: default_retryable_status_codes(),
        }
    }
}

impl Default for ScalingSpec {
    fn default() -> Self {
        Self {
            min_replicas: default_min_replicas(),
            max_replicas: default_max_replicas(),
            target_messages_per_replica: default_target_per_replica(),
            activation_threshold: 0,
            count_in_flight: true,
            count_delayed: false,
            target_drain_seconds: default_target_drain_seconds(),
            scale_up_max_step: default_scale_up_max_step(),
            scale_down_stabilization_seconds: default_scale_down_stabilization_seconds(),
            idle_cooldown_seconds: default_idle_cooldown_seconds(),
            poll_interval_seconds: default_poll_interval_seconds(),
        }
    }
}
