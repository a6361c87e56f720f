//! The replicas a reader Deployment starts with, and when the reconciler's apply names them.
//!
//! Why: the reconciler leaves `spec.replicas` to the autoscaler (field manager `sluice-scaler`),
//! but a Deployment created without it gets Kubernetes' default of one replica. A thousand new
//! sources at `minReplicas: 0` would then start a thousand readers (pods scheduled, tokens
//! minted, queues polled) for the autoscaler to stop on its next tick. So the apply that creates
//! the Deployment names the replicas the source starts at, and the autoscaler's field manager then
//! takes the field over with an apply of the same value. From then on the reconciler's applies do
//! not name it: a field another manager still owns stays when one manager lets go of it, where a
//! field no one owns would go back to the default of one.

use k8s_openapi::api::apps::v1::Deployment;
use sluice_crds::SqsSourceSpec;

use crate::names::{FIELD_MANAGER, SCALER_FIELD_MANAGER};

/// Where a source starts before the autoscaler's first reading: none while suspended, else its
/// `minReplicas` (the autoscaler adds readers from there as soon as it sees messages).
pub fn starting_replicas(spec: &SqsSourceSpec) -> i32 {
    if spec.suspend { 0 } else { spec.scaling.min_replicas.max(0) }
}

/// The `spec.replicas` the reconciler's apply names, given the Deployment as it is (`None`:
/// not created yet) and the source's [`starting_replicas`]. `None` leaves the field to whoever
/// owns it:
/// - no Deployment yet: the starting replicas;
/// - the reconciler owns the field and the autoscaler does not (the hand-over after the create
///   did not happen, say the operator stopped in between): the current value, kept until the
///   hand-over is made;
/// - otherwise (the autoscaler owns it, or no one does: a Deployment of an older release): `None`.
pub fn replicas_to_name(existing: Option<&Deployment>, starting: i32) -> Option<i32> {
    let Some(deployment) = existing else {
        return Some(starting);
    };
    let owners = replicas_owners(deployment);
    if owners.iter().any(|m| m == SCALER_FIELD_MANAGER) || !owners.iter().any(|m| m == FIELD_MANAGER) {
        return None;
    }
    Some(deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(starting))
}

/// The field managers whose entry in `managedFields` holds `spec.replicas`.
fn replicas_owners(deployment: &Deployment) -> Vec<String> {
    let entries = deployment.metadata.managed_fields.as_deref().unwrap_or_default();
    entries
        .iter()
        .filter(|entry| {
            let fields = entry.fields_v1.as_ref().map(|f| &f.0);
            fields.and_then(|f| f.get("f:spec")).and_then(|s| s.get("f:replicas")).is_some()
        })
        .filter_map(|entry| entry.manager.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
    use serde_json::json;

    use super::*;

    fn spec(min: i32, suspend: bool) -> SqsSourceSpec {
        let mut spec: SqsSourceSpec = serde_json::from_value(json!({
            "queues": [{ "url": "http://127.0.0.1:4566/000000000000/q" }],
            "sinks": [{ "name": "out", "log": {} }],
        }))
        .expect("a minimal spec");
        spec.scaling.min_replicas = min;
        spec.suspend = suspend;
        spec
    }

    fn entry(manager: &str, operation: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            operation: Some(operation.to_owned()),
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn deployment(replicas: i32, entries: Vec<ManagedFieldsEntry>) -> Deployment {
        Deployment {
            metadata: ObjectMeta { managed_fields: Some(entries), ..ObjectMeta::default() },
            spec: Some(DeploymentSpec { replicas: Some(replicas), ..DeploymentSpec::default() }),
            status: None,
        }
    }

    const WITH_REPLICAS: fn() -> serde_json::Value =
        || json!({ "f:spec": { "f:replicas": {}, "f:template": {} } });
    const WITHOUT_REPLICAS: fn() -> serde_json::Value = || json!({ "f:spec": { "f:template": {} } });

    #[test]
    fn a_new_deployment_starts_at_min_replicas_or_none_while_suspended() {
        assert_eq!(replicas_to_name(None, starting_replicas(&spec(0, false))), Some(0));
        assert_eq!(replicas_to_name(None, starting_replicas(&spec(2, false))), Some(2));
        assert_eq!(replicas_to_name(None, starting_replicas(&spec(2, true))), Some(0));
    }

    #[test]
    fn once_the_autoscaler_owns_the_field_the_apply_leaves_it_alone() {
        let handed_over = deployment(
            5,
            vec![
                entry(FIELD_MANAGER, "Apply", WITHOUT_REPLICAS()),
                entry(SCALER_FIELD_MANAGER, "Update", json!({ "f:spec": { "f:replicas": {} } })),
            ],
        );
        assert_eq!(replicas_to_name(Some(&handed_over), starting_replicas(&spec(0, false))), None);
        let both = deployment(
            0,
            vec![
                entry(FIELD_MANAGER, "Apply", WITH_REPLICAS()),
                entry(SCALER_FIELD_MANAGER, "Apply", json!({ "f:spec": { "f:replicas": {} } })),
            ],
        );
        assert_eq!(
            replicas_to_name(Some(&both), starting_replicas(&spec(0, false))),
            None,
            "the reconciler lets go"
        );
    }

    #[test]
    fn a_create_not_yet_handed_over_keeps_its_current_value() {
        let created = deployment(3, vec![entry(FIELD_MANAGER, "Apply", WITH_REPLICAS())]);
        assert_eq!(replicas_to_name(Some(&created), starting_replicas(&spec(0, false))), Some(3));
    }

    #[test]
    fn a_field_no_one_owns_is_not_taken() {
        let older = deployment(4, vec![entry(FIELD_MANAGER, "Apply", WITHOUT_REPLICAS())]);
        assert_eq!(replicas_to_name(Some(&older), starting_replicas(&spec(0, false))), None);
        let scaled_by_hand = deployment(4, vec![entry("kubectl", "Update", WITH_REPLICAS())]);
        assert_eq!(replicas_to_name(Some(&scaled_by_hand), starting_replicas(&spec(0, false))), None);
    }
}
