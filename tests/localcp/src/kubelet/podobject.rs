//! Pod objects mirroring the local processes, so `kubectl get pods` and tests that list pods by label
//! see what runs. The processes are the truth: a Pod object deleted by someone else does not stop its
//! process (a kubelet would).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::template::PodPlan;

/// Creates the Pod object for a started pod and returns its uid (empty if it could not be created).
pub async fn create(client: &kube::Client, deploy: &Deployment, plan: &PodPlan, name: &str) -> String {
    let ns = deploy.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut labels = plan.labels.clone();
    labels.insert("pod-template-hash".into(), plan.hash.clone());
    let spec = deploy.spec.as_ref().and_then(|s| s.template.spec.clone());
    let owner = deploy.controller_owner_ref(&()).map(|o| vec![o]);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": owner},
        "spec": spec,
    });
    let Ok(pod) = serde_json::from_value::<Pod>(pod) else { return String::new() };
    match api.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}]}});
            let _ = api
                .patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(status))
                .await;
            created.uid().unwrap_or_default()
        }
        Err(e) => {
            tracing::warn!(pod = name, error = %e, "could not create the Pod object");
            String::new()
        }
    }
}

/// Deletes the Pod object of a stopped pod (already gone is fine).
pub async fn delete(client: &kube::Client, namespace: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let _ = api.delete(name, &DeleteParams::default()).await;
}
