//! How many reader replicas a source runs.
//!
//! The autoscaler (`operator/src/scaler`) reads these knobs; bounds keep it from being configured
//! into a loop that polls SQS too often or never scales down.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::scaling_fallback::FallbackSpec;

/// Autoscaling of the reader Deployment from the queue's depth and the readers' drain rate.
/// Default: 1 to 10 replicas, 100 messages per replica, checked every 5 s.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas")
    .field_path(".minReplicas")
    .message("spec.scaling.minReplicas must be <= spec.scaling.maxReplicas: lower minReplicas or raise maxReplicas"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingSpec {
    /// Fewest reader replicas, 0-1000; 0 lets an idle source scale to zero. Default 1.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0, max = 1000))]
    pub min_replicas: i32,
    /// Most reader replicas, 1-1000, at least `minReplicas`. Default 10.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_replicas: i32,
    /// Backlog (messages) one replica is expected to hold, 1-1000000000. Default 100.
    #[serde(default = "default_target_per_replica")]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub target_messages_per_replica: i64,
    /// Backlog above which 0 replicas become 1, 0-1000000000. Default 0 (any message).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000_000))]
    pub activation_threshold: i64,
    /// Consecutive readings (one per `pollIntervalSeconds`) above `activationThreshold` that wake
    /// a source at zero replicas, 1-5. Default 2: SQS's figures are approximate, and a single
    /// non-zero reading of an empty queue would otherwise start a reader for nothing (and, with
    /// `idleCooldownSeconds`, keep it a minute). The second reading adds at most one poll interval
    /// to the reaction from zero; 1 wakes on the first reading. Scaling above zero is not delayed.
    #[serde(default = "default_activation_readings")]
    #[schemars(range(min = 1, max = 5))]
    pub activation_readings: i32,
    /// Count in-flight messages (ApproximateNumberOfMessagesNotVisible) as backlog. Default true.
    #[serde(default = "default_true")]
    pub count_in_flight: bool,
    /// Count delayed messages (ApproximateNumberOfMessagesDelayed) as backlog. Default false.
    #[serde(default)]
    pub count_delayed: bool,
    /// The backlog should be cleared within this many seconds at the measured drain rate,
    /// 1-86400. Default 60.
    #[serde(default = "default_target_drain_seconds")]
    #[schemars(range(min = 1, max = 86_400))]
    pub target_drain_seconds: i32,
    /// A delivery latency target in seconds, 1-86400. The readers report the age of the oldest
    /// message they received (from its SentTimestamp) and the 99th percentile of the time from
    /// sending to hand-off to the sinks. The autoscaler runs enough replicas to take the arrival
    /// rate (the readers' summed drain rate plus the backlog's growth over the last intervals) and
    /// clear the backlog within the target, at 90% of the per-replica rate measured under load.
    /// While the larger reported figure exceeds the target it does not scale in, and adds one more
    /// replica than that only when the backlog neither shrinks nor is less than the readers drain
    /// within the target; it scales in once the figure is under the target and fewer replicas carry
    /// the arrivals. Absent: no latency target (depth and `targetDrainSeconds` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400))]
    pub target_latency_seconds: Option<i32>,
    /// Most replicas added in one scaling decision, 1-1000. Default 10.
    #[serde(default = "default_scale_up_max_step")]
    #[schemars(range(min = 1, max = 1000))]
    pub scale_up_max_step: i32,
    /// Seconds a lower replica count must be wanted before scaling down, 0-3600. Default 60.
    #[serde(default = "default_scale_down_stabilization_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub scale_down_stabilization_seconds: i32,
    /// Seconds of an empty queue before scaling to zero (only with `minReplicas: 0`), 0-86400.
    /// Counted from the last reading above `activationThreshold`, so it is also the least time a
    /// woken source keeps one reader after its last activity, however slowly that reader
    /// starts. Default 60.
    #[serde(default = "default_idle_cooldown_seconds")]
    #[schemars(range(min = 0, max = 86_400))]
    pub idle_cooldown_seconds: i32,
    /// Seconds between GetQueueAttributes calls, 1-300. Default 5.
    #[serde(default = "default_poll_interval_seconds")]
    #[schemars(range(min = 1, max = 300))]
    pub poll_interval_seconds: i32,
    /// Seconds between GetQueueAttributes calls while the source is idle (at zero replicas, with
    /// no backlog above `activationThreshold`), 1-3600; never faster than `pollIntervalSeconds`.
    /// Default 30: an idle source costs 2 AWS requests a minute instead of 12, and a message
    /// arriving at an idle queue is seen within this many seconds (a wake-up then confirms at
    /// `pollIntervalSeconds`). Set it equal to `pollIntervalSeconds` for the fastest wake-up.
    #[serde(default = "default_idle_poll_interval_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub idle_poll_interval_seconds: i32,
    /// What the autoscaler does while the queue's attributes cannot be read. Default:
    /// `atLeastCurrent` 1 replica after 3 failed reads (see `FallbackSpec`).
    #[serde(default)]
    pub fallback: FallbackSpec,
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
fn default_true() -> bool {
    true
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
fn default_idle_poll_interval_seconds() -> i32 {
    30
}
fn default_activation_readings() -> i32 {
    2
}

impl Default for ScalingSpec {
    fn default() -> Self {
        Self {
            min_replicas: default_min_replicas(),
            max_replicas: default_max_replicas(),
            target_messages_per_replica: default_target_per_replica(),
            activation_threshold: 0,
            activation_readings: default_activation_readings(),
            count_in_flight: true,
            count_delayed: false,
            target_drain_seconds: default_target_drain_seconds(),
            target_latency_seconds: None,
            scale_up_max_step: default_scale_up_max_step(),
            scale_down_stabilization_seconds: default_scale_down_stabilization_seconds(),
            idle_cooldown_seconds: default_idle_cooldown_seconds(),
            poll_interval_seconds: default_poll_interval_seconds(),
            idle_poll_interval_seconds: default_idle_poll_interval_seconds(),
            fallback: FallbackSpec::default(),
        }
    }
}
