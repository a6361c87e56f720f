//! CPU and memory of the reader container.
//!
//! Why not Kubernetes' `ResourceRequirements`: its quantities are int-or-string, so `cpu: 1`
//! would pass the schema and then fail the operator's typed decoding of the whole source. Here
//! every amount is a string in the quantity syntax, checked by the schema, and only the three
//! resources a reader uses can be named.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Requests and limits of the reader container.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReaderResources {
    /// What the scheduler reserves for each reader. Absent: 100m CPU and 48Mi memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceAmounts>,
    /// The most each reader may use. Absent: a 512Mi memory limit (room for `held.maxBytes` of
    /// 1 MiB messages and their copies on the way to the sinks) and no CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceAmounts>,
}

/// Amounts of CPU, memory and ephemeral storage, each a Kubernetes quantity string such as
/// `250m`, `1`, `128Mi` or `1Gi` (at most 32 characters).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceAmounts {
    /// CPU, e.g. `250m` or `1`. Absent: not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[0-9]+([.][0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')")
        .message("spec.reader.resources cpu must be a quantity such as 250m or 1 (a string): fix the amount"))]
    pub cpu: Option<String>,
    /// Memory, e.g. `128Mi` or `1Gi`. Absent: not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[0-9]+([.][0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')")
        .message("spec.reader.resources memory must be a quantity such as 128Mi or 1Gi (a string): fix the amount"))]
    pub memory: Option<String>,
    /// Ephemeral storage, e.g. `64Mi` (readers write nothing to disk). Absent: not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[0-9]+([.][0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')")
        .message("spec.reader.resources ephemeralStorage must be a quantity such as 64Mi (a string): fix the amount"))]
    pub ephemeral_storage: Option<String>,
}
