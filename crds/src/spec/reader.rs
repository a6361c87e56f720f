//! Pod-level settings of the reader Deployment that are not about SQS.
//!
//! Kept apart from receive/delivery so that changing a log level never reads as a data-path change.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Reader pod settings. Default: the operator's own image, `info` logs, a grace period sized from
/// the receive and delivery settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReaderSpec {
    /// Reader container image (1-1024 characters). Absent: the image the operator was built with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
    /// `RUST_LOG` filter for the readers, e.g. `info` or `sluice_reader=debug` (1-1024
    /// characters). Absent: `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub log_level: Option<String>,
    /// Pod terminationGracePeriodSeconds, 0-3600: time to drain on scale-down. Absent: sized from
    /// receive and delivery settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub termination_grace_period_seconds: Option<i64>,
}
