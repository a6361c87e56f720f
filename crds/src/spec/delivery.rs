//! What "delivered" means for a source: the guarantee, the checkpoint cadence, and retries.
//!
//! Exactly-once rests on the checkpoint protocol (`protocol/PROTOCOL.md`), which only works with an
//! epoch length, so the rule below makes the interval mandatory there instead of guessing one.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Delivery guarantee: `atLeastOnce` (delete after the sink acknowledged; a crash may redeliver)
/// or `exactlyOnce` (delete only after the epoch's checkpoint committed; needs
/// `checkpointIntervalSeconds` and sinks that can take part). Default `atLeastOnce`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Guarantee {
    // Delete once the sink acknowledged.
    #[default]
    AtLeastOnce,
    // Delete once the epoch is committed by every live reader.
    ExactlyOnce,
}

/// Delivery settings. Default: at-least-once, dead-letter on failure, exponential retries,
/// unready after 60 s without a successful delivery.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.guarantee != 'exactlyOnce' || has(self.checkpointIntervalSeconds)")
    .field_path(".checkpointIntervalSeconds")
    .reason(Reason::FieldValueRequired)
    .message("spec.delivery.checkpointIntervalSeconds is required when guarantee is exactlyOnce: set it (1-3600 seconds) or use guarantee atLeastOnce"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliverySpec {
    /// `atLeastOnce` or `exactlyOnce`. Default `atLeastOnce`.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// Epoch length in seconds for exactlyOnce, 1-3600: how often the operator opens a new
    /// checkpoint epoch. Required with exactlyOnce; ignored otherwise. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub checkpoint_interval_seconds: Option<i32>,
    /// On a message that fails every retry: true stops the reader (exit code 3, nothing
    /// undelivered is deleted); false sends it to `deadLetterSink`, if one is set, and goes on.
    /// A message that no dead-letter sink took (none set, or it failed) goes back to the queue
    /// after a delay that grows with its receive count: 1 s after the first receive, doubling, at
    /// most 300 s (so at most 5 receives in 30 s). Default false.
    #[serde(default)]
    pub fail_on_error: bool,
    /// How failed sink deliveries are retried. Default: exponential, 5 attempts, 100 ms to 10 s,
    /// jitter, 60 s overall. When the attempts run out on a fault of the sink's (refused, timeout,
    /// 5xx, 408, 429, AWS throttling), the message is held, invisible, and delivered again in
    /// rounds (1 s doubling to 30 s) while the reader runs; it never goes back to the queue for it.
    #[serde(default)]
    pub retry: RetrySpec,
    /// Seconds without a successful delivery, while deliveries fail, after which a reader
    /// reports not ready (`/readyz` 503) and the source's `SinksHealthy` condition turns False,
    /// 1-3600. A short time pages sooner; a long one rides out brief sink outages quietly.
    /// Default 60.
    #[serde(default = "default_unready_after_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub unready_after_seconds: u32,
    /// How a standard queue's messages that carry a `MessageGroupId` (a tenant, as SQS fair
    /// queues mark one) share the reader's deliveries: `byGroup` takes the deliveries waiting
    /// for a sink in turns by group, round-robin, so one group's backlog behind a slow sink or a
    /// rate limit does not make the others wait behind all of it; `arrival` takes them in the
    /// order received. FIFO queues keep their order within a group either way, and messages with
    /// no group id take no turns. Default `byGroup`: a sender that sets group ids on a standard queue
    /// has asked SQS for fair queues, and a reader that took the groups in arrival order would
    /// undo that fairness on its own side; without group ids nothing changes. docs/fair-delivery.md.
    #[serde(default)]
    pub fairness: Fairness,
}

/// The order in which deliveries waiting for the sinks are taken (see `DeliverySpec::fairness`).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Fairness {
    // In turns by MessageGroupId, round-robin.
    #[default]
    ByGroup,
    // In the order received.
    Arrival,
}

fn default_unready_after_seconds() -> u32 {
    60
}

impl Default for DeliverySpec {
    fn default() -> Self {
        Self {
            guarantee: Guarantee::default(),
            checkpoint_interval_seconds: None,
            fail_on_error: false,
            retry: RetrySpec::default(),
            unready_after_seconds: default_unready_after_seconds(),
            fairness: Fairness::default(),
        }
    }
}

/// Retry backoff: `fixed` (every delay is `initialDelayMs`) or `exponential` (doubling from
/// `initialDelayMs` up to `maxDelayMs`). Default `exponential`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RetryStrategy {
    // Constant delay.
    Fixed,
    // Doubling delay, capped.
    #[default]
    Exponential,
}

/// Retry policy for sink deliveries: the attempts a sink makes for one delivery. When they run out
/// on a fault of the sink's (refused, timeout, 5xx, 408, 429, AWS throttling), the message is not
/// handed back: the reader holds it, invisible, and delivers it again in rounds (1 s doubling to
/// 30 s) while the reader runs, its sink's circuit pausing receiving meanwhile. Only a rejection of
/// the message itself (another 4xx, a body too large) takes the dead-letter route.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.maxDelayMs >= self.initialDelayMs")
    .field_path(".maxDelayMs")
    .message("spec.delivery.retry.maxDelayMs must be >= initialDelayMs: raise maxDelayMs or lower initialDelayMs"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetrySpec {
    /// `fixed` or `exponential`. Default `exponential`.
    #[serde(default)]
    pub strategy: RetryStrategy,
    /// Attempts in all, including the first, 1-100 (1 means no retry). Default 5.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: u32,
    /// First delay in milliseconds, 1-3600000. Default 100.
    #[serde(default = "default_initial_delay_ms")]
    #[schemars(range(min = 1, max = 3_600_000))]
    pub initial_delay_ms: u64,
    /// Largest delay in milliseconds, 1-3600000, at least `initialDelayMs`. Default 10000.
    #[serde(default = "default_max_delay_ms")]
    #[schemars(range(min = 1, max = 3_600_000))]
    pub max_delay_ms: u64,
    /// Give up after this many seconds whatever the attempts, 1-86400. Default 60.
    #[serde(default = "default_max_elapsed_seconds")]
    #[schemars(range(min = 1, max = 86_400))]
    pub max_elapsed_seconds: u64,
    /// Randomize each delay by up to half of it, so readers do not retry in step. Default true.
    #[serde(default = "default_true")]
    pub jitter: bool,
    /// HTTP statuses (100-599) that are retried, at most 64; connect errors and timeouts always
    /// are. Default [408, 429, 500, 502, 503, 504].
    #[serde(default = "default_retryable_status_codes")]
    #[schemars(length(max = 64), inner(range(min = 100, max = 599)))]
    pub retryable_status_codes: Vec<u16>,
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
