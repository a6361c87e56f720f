//! The coordinator's writes as server-side-apply bodies naming only its own fields.
//!
//! Why SSA with `sluice-checkpoint` as field manager: the autoscaler owns the checkpoint
//! ConfigMap's `replicas` key and its own status fields; applying only our keys means neither ever
//! resets the other. The checkpoint body carries the resourceVersion that was read, which the API
//! server checks like an update's: the compare-and-swap the protocol needs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use sluice_protocol::{Checkpoint, SOURCE_LABEL, checkpoint_configmap_name};

use super::plan::CheckpointStatus;

/// The checkpoint ConfigMap apply: every data key but `replicas`.
pub fn checkpoint(
    source: &str,
    cp: &Checkpoint,
    resource_version: Option<&str>,
    owner: &OwnerReference,
) -> Value {
    let mut data = cp.to_data();
    data.remove("replicas");
    let mut metadata = json!({
        "name": checkpoint_configmap_name(source),
        "labels": { SOURCE_LABEL: source },
        "ownerReferences": [owner],
    });
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data })
}

/// The status apply: epochs, fenced readers, the last barrier's duration and the
/// CheckpointHealthy condition. `since` is the
/// condition's lastTransitionTime (RFC 3339), kept while its status does not change.
pub fn status(status: &CheckpointStatus, since: &str, generation: Option<i64>) -> Value {
    let mut body = json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "SqsSource",
        "status": {
            "currentEpoch": status.current_epoch,
            "committedEpoch": status.committed_epoch,
            "fencedReaders": status.fenced_readers,
            "conditions": [{
                "type": "CheckpointHealthy",
                "status": if status.healthy { "True" } else { "False" },
                "reason": status.reason,
                "message": status.message,
                "lastTransitionTime": since,
                "observedGeneration": generation,
            }],
        },
    });
    // Left out until the first commit seen (an apply names only fields it sets).
    if let Some(ms) = status.last_barrier_ms {
        body["status"]["lastBarrierMilliseconds"] = json!(ms);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "sluice.dev/v1alpha1".into(),
            kind: "SqsSource".into(),
            name: "orders".into(),
            uid: "u-1".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn the_checkpoint_apply_leaves_replicas_to_the_autoscaler_and_pins_the_version() {
        let mut cp = Checkpoint::initial(7);
        cp.replicas = Some(4);
        let body = checkpoint("orders", &cp, Some("42"), &owner());
        assert_eq!(body["metadata"]["name"], "orders-checkpoint");
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["data"]["openEpoch"], "1");
        assert!(body["data"].get("replicas").is_none());
        let first = checkpoint("orders", &cp, None, &owner());
        assert!(first["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn the_status_apply_carries_only_checkpoint_fields() {
        let s = CheckpointStatus {
            current_epoch: 5,
            committed_epoch: 4,
            fenced_readers: vec!["r-b".into()],
            live_readers: 1,
            last_barrier_ms: Some(2_500),
            healthy: false,
            reason: "BarrierStalled",
            message: "waiting".into(),
        };
        let body = status(&s, "2026-11-29T22:00:00Z", Some(3));
        let st = &body["status"];
        assert_eq!(st.as_object().unwrap().len(), 5);
        assert_eq!(st["currentEpoch"], 5);
        assert_eq!(st["lastBarrierMilliseconds"], 2_500);
        let before_any_commit = CheckpointStatus { last_barrier_ms: None, ..s };
        let body = status(&before_any_commit, "2026-11-29T22:00:00Z", Some(3));
        assert!(body["status"].get("lastBarrierMilliseconds").is_none());
        assert_eq!(st["fencedReaders"][0], "r-b");
        assert_eq!(st["conditions"][0]["status"], "False");
        assert_eq!(st["conditions"][0]["observedGeneration"], 3);
    }
}
