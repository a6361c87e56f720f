//! Which watch events of a reader Deployment are worth a reconcile: those that change what the
//! reconciler reads of it.
//!
//! Why: the Deployment controller writes a new Deployment's status several times while it makes
//! the first ReplicaSet (observed generation, then its conditions one by one), and scales
//! write it again. Each write by another writer started a reconcile (a read of the source and of
//! the Deployment, a GetQueueAttributes, perhaps a status write), though most of them change no
//! condition: about one and a half reconciles per new source of a thousand created together, on
//! an API server already busy with the creation (BENCHMARKS.md, "Many sources on one operator").
//!
//! What counts: the Deployment's metadata that only other writers change (generation, labels,
//! annotations but the controller's revision, owners, deletion: an edit of the spec or a deletion
//! the reconciler must undo) and its rollout as the conditions read it (`rollout_digest`). The
//! first event of a Deployment after the operator starts (or after the watch lists again) counts
//! only if it differs from what was seen before; a Deployment never seen counts.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;

use crate::conditions::rollout_digest;
use crate::own_writes::shape;

/// The last view of each reader Deployment seen, by (namespace, name).
#[derive(Debug, Default)]
pub struct DeploymentViews(HashMap<(String, String), (Option<u64>, u64)>);

impl DeploymentViews {
    /// Records `deployment` as seen; whether what the reconciler reads of it changed.
    pub fn changed(&mut self, deployment: &Deployment) -> bool {
        let key = (deployment.namespace().unwrap_or_default(), deployment.name_any());
        let view = (shape(deployment), rollout_digest(deployment));
        self.0.insert(key, view) != Some(view)
    }

    /// Forgets a deleted Deployment (one made again counts as new).
    pub fn forget(&mut self, deployment: &Deployment) {
        self.0.remove(&(deployment.namespace().unwrap_or_default(), deployment.name_any()));
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
    use kube::api::ObjectMeta;

    use super::*;

    fn reader(generation: i64, replicas: i32, status: Option<DeploymentStatus>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("orders-reader".into()),
                namespace: Some("shop".into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec { replicas: Some(replicas), ..DeploymentSpec::default() }),
            status,
        }
    }

    fn observed(generation: i64, replicas: i32, ready: i32) -> DeploymentStatus {
        DeploymentStatus {
            observed_generation: Some(generation),
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            updated_replicas: Some(replicas),
            ..DeploymentStatus::default()
        }
    }

    #[test]
    fn a_new_deployment_counts_and_the_controller_s_status_writes_at_zero_do_not() {
        let mut views = DeploymentViews::default();
        assert!(views.changed(&reader(1, 0, None)), "never seen");
        assert!(!views.changed(&reader(1, 0, Some(observed(1, 0, 0)))), "first status: nothing to roll");
        let mut with_conditions = observed(1, 0, 0);
        with_conditions.conditions = Some(vec![DeploymentCondition {
            type_: "Available".into(),
            status: "True".into(),
            reason: Some("MinimumReplicasAvailable".into()),
            ..DeploymentCondition::default()
        }]);
        assert!(
            !views.changed(&reader(1, 0, Some(with_conditions))),
            "conditions the reconciler does not read"
        );
    }

    #[test]
    fn a_scale_a_rollout_and_an_edit_count() {
        let mut views = DeploymentViews::default();
        assert!(views.changed(&reader(1, 0, Some(observed(1, 0, 0)))));
        assert!(views.changed(&reader(1, 2, Some(observed(1, 0, 0)))), "scaled up");
        assert!(views.changed(&reader(1, 2, Some(observed(1, 2, 1)))), "a reader ready");
        assert!(!views.changed(&reader(1, 2, Some(observed(1, 2, 1)))), "the same again");
        assert!(views.changed(&reader(2, 2, Some(observed(1, 2, 1)))), "the spec edited");
        let mut labelled = reader(2, 2, Some(observed(1, 2, 1)));
        labelled.metadata.labels = Some([("team".to_owned(), "x".to_owned())].into());
        assert!(views.changed(&labelled), "a label added");
    }

    #[test]
    fn a_deployment_deleted_and_made_again_counts() {
        let mut views = DeploymentViews::default();
        let deployment = reader(1, 0, Some(observed(1, 0, 0)));
        assert!(views.changed(&deployment));
        views.forget(&deployment);
        assert!(views.changed(&deployment));
    }
}
