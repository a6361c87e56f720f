//! The readers' PodDisruptionBudget.
//!
//! Why one at a time: a node drain evicts pods with SIGTERM like a scale-down, and each reader
//! drains its in-flight work (and, under exactlyOnce, its open epoch) before it exits. Evicting
//! every reader of a source at once would stop the source for a whole drain and, under
//! exactlyOnce, hold the checkpoint barrier on readers that are all leaving. `maxUnavailable: 1`
//! rather than a `minAvailable` keeps a source scaled to zero or one replica drainable.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::names;
use crate::validate::Validated;

pub(super) fn disruption_budget(valid: &Validated<'_>, owner: &OwnerReference) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: child_meta(valid, owner, names::reader_name(&valid.name)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(names::selector_labels(&valid.name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}
