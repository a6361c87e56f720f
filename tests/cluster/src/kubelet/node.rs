//! The Node object and its heartbeat, as a kubelet keeps them.
//!
//! A kubelet registers its Node (capacity, addresses, `Ready`), then renews its Lease in
//! `kube-node-lease` every 10 s; the controller-manager's node lifecycle controller reads that Lease
//! and marks the node unreachable (tainting it, then evicting its pods) when it stops. The scheduler
//! places pods only on a Ready node with room, so the capacity here is generous: what limits a pod on
//! this machine is the machine, not the Node's numbers.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// How often the Lease is renewed (a kubelet's default).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How long the Lease is valid (a kubelet's default).
const LEASE_SECONDS: i32 = 40;

/// The Node's status: Ready, loopback addresses, capacity.
pub fn status(version: &str) -> serde_json::Value {
    let now = super::now();
    let capacity = json!({"cpu": "64", "memory": "256Gi", "pods": "500", "ephemeral-storage": "100Gi"});
    json!({
        "capacity": capacity,
        "allocatable": capacity,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "localhost"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "sluice process kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "nodeInfo": {"machineID": "sluice", "systemUUID": "sluice", "bootID": "sluice",
            "kernelVersion": "", "osImage": "local processes", "containerRuntimeVersion": "process://sluice",
            "kubeletVersion": version, "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH},
    })
}

/// Creates the Node (as the node itself: NodeRestriction lets a node create only its own) and
/// writes its status.
pub async fn register(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let version = client.apiserver_version().await.map(|v| v.git_version).unwrap_or_default();
    if api.get_opt(name).await?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
                "sluice.dev/process-kubelet": "true"}},
        }))?;
        api.create(&PostParams::default(), &node).await?;
    }
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status(&version)})))
        .await?;
    Ok(())
}

/// Renews (or creates) the node's Lease.
pub async fn renew_lease(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = super::now_micros();
    let spec = json!({"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now});
    if api.get_opt(name).await?.is_none() {
        let lease: Lease = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec,
        }))?;
        api.create(&PostParams::default(), &lease).await?;
    } else {
        api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await?;
    }
    Ok(())
}
