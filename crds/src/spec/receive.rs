//! How readers call ReceiveMessage, and how fast the source may go.
//!
//! The bounds are SQS's own limits (10 messages per call, 20 s long poll, 12 h visibility), so a
//! spec the API accepts is one SQS accepts too; the rate limit is for the whole source because
//! that is what downstream systems care about (the operator divides it among replicas).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::held::HeldSpec;

/// ReceiveMessage settings, per poller. Default: 10 messages, 20 s long poll, the queue's own
/// visibility timeout, 4 pollers, all attributes.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiveSpec {
    /// Messages asked for per ReceiveMessage call, 1-10 (the SQS maximum). Default 10.
    #[serde(default = "default_max_messages")]
    #[schemars(range(min = 1, max = 10))]
    pub max_messages: i32,
    /// Long-poll wait per ReceiveMessage call in seconds, 0-20 (0 is a short poll). Default 20.
    #[serde(default = "default_wait_time_seconds")]
    #[schemars(range(min = 0, max = 20))]
    pub wait_time_seconds: i32,
    /// Visibility timeout asked for on receive in seconds, 0-43200 (12 h); the reader extends it
    /// while a message is still being worked on. Absent: the queue's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 43200))]
    pub visibility_timeout_seconds: Option<i32>,
    /// Concurrent long-poll loops per reader pod: at least this many, 1-64 (default 4), grown
    /// while it pays, up to twice this many: a poller is added while receives come back full and
    /// nothing else (the sinks, the rate limit) is the limit, and kept only if the rate then rises
    /// by most of what it promised; pollers are given back when receives come back part-empty or
    /// each call starts taking well longer than usual at SQS.
    #[serde(default = "default_pollers")]
    #[schemars(range(min = 1, max = 64))]
    pub pollers: i32,
    /// System attributes to receive (e.g. `SentTimestamp`, `MessageGroupId`), at most 32 names of
    /// 1-256 characters; `All` for every one. Default `["All"]`.
    #[serde(default = "default_all")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)))]
    pub attribute_names: Vec<String>,
    /// Message attributes to receive, at most 32 names of 1-256 characters; `All` for every one
    /// (needed for attribute routing). Default `["All"]`.
    #[serde(default = "default_all")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)))]
    pub message_attribute_names: Vec<String>,
    /// Ceilings on what one reader holds (received, not yet settled): pollers stop receiving at
    /// the bound and resume as messages settle. Default: 1000 messages, 64 MiB, 2 s horizon.
    #[serde(default)]
    pub held: HeldSpec,
    /// Batching window in milliseconds, 0-20000: when a receive comes back with fewer than
    /// `maxMessages`, the queue's pollers take turns and the next receive waits up to this long so
    /// that it comes back fuller, and deletes and visibility changes wait up to this long to fill
    /// their batches of 10. It costs latency: on a quiet queue a message waits up to this long
    /// before it is received, and its delete up to this long again (delivery itself is not
    /// delayed by the delete). A full batch is never delayed: a backlog is received at full speed.
    /// On a trickle it cuts requests per message up to tenfold (SQS bills per request). Absent or 0:
    /// off (receive again at once, deletes linger 15 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 20000))]
    pub batch_window_milliseconds: Option<u32>,
}

/// Throughput cap for the whole source, a token bucket the operator divides evenly among reader
/// replicas. Set at least one of `messagesPerSecond` and `bytesPerSecond`. Absent: no limit.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.messagesPerSecond) || has(self.bytesPerSecond)")
    .message("spec.rateLimit needs messagesPerSecond or bytesPerSecond (or both): set one, or remove rateLimit for no limit"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitSpec {
    /// Messages per second for the whole source, 1-1000000. Absent: messages are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub messages_per_second: Option<u32>,
    /// Message body bytes per second for the whole source, 1-10737418240 (10 GiB). Absent: bytes
    /// are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_737_418_240u64))]
    pub bytes_per_second: Option<u64>,
    /// Bucket size as seconds' worth of the rate, 1-60: how long a burst may run above the rate
    /// after an idle spell. Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub burst_seconds: Option<u32>,
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

impl Default for ReceiveSpec {
    fn default() -> Self {
        Self {
            max_messages: default_max_messages(),
            wait_time_seconds: default_wait_time_seconds(),
            visibility_timeout_seconds: None,
            pollers: default_pollers(),
            attribute_names: default_all(),
            message_attribute_names: default_all(),
            held: HeldSpec::default(),
            batch_window_milliseconds: None,
        }
    }
}
