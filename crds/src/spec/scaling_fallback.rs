//! What the autoscaler does while it cannot read its queue (GetQueueAttributes fails).
//!
//! A scaler that cannot see the queue has no backlog to size the readers by. Keeping its last
//! decision is the least it can do; scaling by a reading it does not have is the worst (a busy
//! source scaled to zero stops delivering while nobody looks). The choice between keeping the
//! count, a fixed count and at least a count is the user's, as KEDA's `fallback.behavior` is.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the fallback sets the replicas once it applies.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FallbackBehavior {
    // The replica count of the last decision, unchanged: a source at zero stays at zero.
    KeepCurrent,
    // Exactly `replicas` (within minReplicas-maxReplicas), up or down.
    Fixed,
    // The larger of the current count and `replicas`: never fewer readers while blind, and a
    // source at zero gets `replicas` readers that find out for themselves whether there is work.
    #[default]
    AtLeastCurrent,
}

impl FallbackBehavior {
    /// The value as the spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeepCurrent => "keepCurrent",
            Self::Fixed => "fixed",
            Self::AtLeastCurrent => "atLeastCurrent",
        }
    }
}

/// What the autoscaler does after `failureThreshold` consecutive failed reads of the queue's
/// attributes (every queue of the source must answer; one failure fails the interval). Before
/// that it keeps the replica count. While it applies, the status condition `Fallback` is True
/// with reason FallbackApplied and `status.fallback` names the count in force; a Warning event
/// FallbackApplied marks the start and a Normal event FallbackEnded the first good read, after
/// which scaling goes on from the queue as before.
///
/// Default `atLeastCurrent` with 1 replica, after 3 failed reads: a blind scaler never takes
/// readers away (a busy source keeps delivering; its readers reach SQS by their own path and
/// credentials, which may well work), and a source at zero gets one reader, so messages that
/// arrive while the operator cannot see the queue are delivered rather than left waiting for the
/// operator's path to heal. One idle reader costs a pod and its long polls (about three receives
/// a minute); `keepCurrent` saves that at the price of a source at zero staying blind and asleep,
/// and `fixed` suits those who size for the worst case.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.behavior != 'keepCurrent' || !has(self.replicas)")
    .field_path(".replicas")
    .message("spec.scaling.fallback.replicas is not read with behavior keepCurrent: remove it, or use behavior fixed or atLeastCurrent"))]
#[x_kube(validation = Rule::new("self.behavior != 'fixed' || has(self.replicas)")
    .field_path(".replicas")
    .reason(Reason::FieldValueRequired)
    .message("spec.scaling.fallback.replicas is required with behavior fixed: set the replica count to run while the queue cannot be read"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FallbackSpec {
    /// Consecutive failed queue reads (one per `pollIntervalSeconds`) before the fallback
    /// applies, 1-100. Default 3: one lost answer is not an outage.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: i32,
    /// `keepCurrent` (the replicas stay as they are), `fixed` (exactly `replicas`) or
    /// `atLeastCurrent` (the larger of the current count and `replicas`). Default
    /// `atLeastCurrent`.
    #[serde(default)]
    pub behavior: FallbackBehavior,
    /// The replica count `fixed` runs and `atLeastCurrent` keeps at least, 0-1000, raised to
    /// `minReplicas` and lowered to `maxReplicas`. Not allowed with `keepCurrent`; required with
    /// `fixed`; default 1 with `atLeastCurrent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: Option<i32>,
}

fn default_failure_threshold() -> i32 {
    3
}

/// The count `atLeastCurrent` keeps at least when `replicas` is not given.
pub const DEFAULT_FALLBACK_REPLICAS: i32 = 1;

impl Default for FallbackSpec {
    fn default() -> Self {
        Self {
            failure_threshold: default_failure_threshold(),
            behavior: FallbackBehavior::default(),
            replicas: None,
        }
    }
}
