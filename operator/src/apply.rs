//! Writes the children with server-side apply under one field manager.
//!
//! Why SSA with `force`: the operator is the only writer of these fields, so taking them back from
//! a stray `kubectl edit` is the intended drift correction; fields it never sends (the
//! Deployment's `spec.replicas`, owned by `sluice-scaler` once the Deployment exists) stay with
//! whoever set them. An apply
//! is not diffed against a cache that might be stale; it is skipped only when it is exactly what
//! this process last applied and no one else has written the child since (see `own_writes`), which
//! spares the API server a server-side apply of each unchanged child on every reconcile the
//! Deployment controller's writes start. The Deployment goes after the objects its pods need
//! (ConfigMap, ServiceAccount and RoleBinding), so they start with them in place. The
//! source's entry in the namespace's register of reader accounts (build/reader_registry.rs) goes
//! first, by a merge patch of its own key (reader_register.rs), so no reader runs before the
//! admission policy holds it.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::access::ApiCall;
use crate::build::Children;
use crate::build::starting_replicas::replicas_to_name;
use crate::error::Result;
use crate::names::{FIELD_MANAGER, SCALER_FIELD_MANAGER};
use crate::own_writes::{OwnWrites, content_hash};

/// The calls `apply_children` makes: an apply is a `patch`, and a `create` when the object is new.
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("", "configmaps", "patch"),
    ApiCall::new("", "configmaps", "create"),
    ApiCall::new("", "serviceaccounts", "patch"),
    ApiCall::new("", "serviceaccounts", "create"),
    ApiCall::new("rbac.authorization.k8s.io", "rolebindings", "patch"),
    ApiCall::new("rbac.authorization.k8s.io", "rolebindings", "create"),
    // A RoleBinding to the readers' ClusterRole is allowed by this alone (by name in the shipped
    // ClusterRole); without it, by holding everything the role grants (see build/rbac.rs).
    ApiCall::new("rbac.authorization.k8s.io", "clusterroles", "bind"),
    ApiCall::new("apps", "deployments", "get"),
    ApiCall::new("apps", "deployments", "patch"),
    ApiCall::new("apps", "deployments", "create"),
    ApiCall::new("policy", "poddisruptionbudgets", "patch"),
    ApiCall::new("policy", "poddisruptionbudgets", "create"),
    // Every child names the source as its controller with blockOwnerDeletion, which the
    // OwnerReferencesPermissionEnforcement admission plugin authorizes as this.
    ApiCall::new("sluice.dev", "sqssources/finalizers", "update"),
];

/// Applies every child in its namespace that is not as last applied (see `own_writes`),
/// recording each answer in `own`; returns the Deployment as the server now has it (with its
/// status, which the conditions read).
///
/// The children that do not depend on each other go together, so a reconcile waits for the
/// slowest of them rather than their sum. The RoleBinding names a ClusterRole that exists before
/// any source (shipped with the operator), so it waits for nothing; a binding to a missing role
/// would be accepted and grant nothing until the role appears.
pub async fn apply_children(client: &Client, children: &Children, own: &OwnWrites) -> Result<Deployment> {
    // First: the admission policy holds the readers only once their account is registered.
    crate::reader_register::register(client, &children.reader_registry, own).await?;
    let account = async {
        match &children.service_account {
            Some(account) => apply_unless_unchanged(client, account, FIELD_MANAGER, own).await,
            None => Ok(()),
        }
    };
    futures::try_join!(
        apply_unless_unchanged(client, &children.config_map, FIELD_MANAGER, own),
        account,
        apply_unless_unchanged(client, &children.role_binding, FIELD_MANAGER, own),
        apply_unless_unchanged(client, &children.disruption_budget, FIELD_MANAGER, own),
    )?;
    apply_deployment(client, children, own).await
}

/// The Deployment, naming `spec.replicas` only while the reconciler must (see
/// build/starting_replicas.rs); when it did, the autoscaler's field manager takes the field over
/// with an apply of the same value, so the reconciler's next apply can leave it out. Read every
/// time: the conditions need its status, and one found missing is created whatever the ledger says.
async fn apply_deployment(client: &Client, children: &Children, own: &OwnWrites) -> Result<Deployment> {
    let mut deployment = children.deployment.clone();
    let namespace = deployment.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let existing = api.get_opt(&deployment.name_any()).await?;
    let named = replicas_to_name(existing.as_ref(), children.starting_replicas);
    if let (Some(spec), Some(replicas)) = (deployment.spec.as_mut(), named) {
        spec.replicas = Some(replicas);
    }
    let hash = content_hash(&deployment);
    if let Some(existing) = existing
        && own.unchanged(&deployment, FIELD_MANAGER, hash)
    {
        return Ok(existing);
    }
    let mark = own.mark();
    let applied = apply_as(client, &deployment, FIELD_MANAGER).await?;
    own.applied(&applied, FIELD_MANAGER, hash, mark);
    let Some(replicas) = named else { return Ok(applied) };
    // Only the replicas: a Deployment gone since (its source deleted) is refused as invalid, not
    // created again.
    let hand_over = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": applied.name_any(), "namespace": namespace },
        "spec": { "replicas": replicas },
    });
    let params = PatchParams::apply(SCALER_FIELD_MANAGER).force();
    let handed_over = api.patch(&applied.name_any(), &params, &Patch::Apply(&hand_over)).await?;
    // The next reconcile would apply the Deployment without the replicas, which changes only who
    // co-owns the field (the autoscaler owns it now either way): recorded as applied, so that
    // apply is not sent.
    own.applied(&handed_over, FIELD_MANAGER, content_hash(&children.deployment), mark);
    Ok(handed_over)
}

/// Applies `object` as `manager` unless it is what that manager last applied and no one changed
/// it since (see `own_writes`); records the answer.
async fn apply_unless_unchanged<K>(client: &Client, object: &K, manager: &str, own: &OwnWrites) -> Result<()>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let hash = content_hash(object);
    if own.unchanged(object, manager, hash) {
        return Ok(());
    }
    let mark = own.mark();
    let answer = apply_as(client, object, manager).await?;
    own.applied(&answer, manager, hash, mark);
    Ok(())
}

async fn apply_as<K>(client: &Client, object: &K, manager: &str) -> Result<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    let params = PatchParams::apply(manager).force();
    Ok(api.patch(&object.name_any(), &params, &Patch::Apply(object)).await?)
}
