//! `build()`: the children of a source, computed from its spec alone.
//!
//! Why pure: what the operator wants to exist is a function of the spec and the operator's
//! defaults, nothing else. Keeping the API server out of it makes it testable from YAML fixtures
//! and lets `apply` be the only place that writes. Each child has its own file.

mod config;
mod deployment;
mod disruption;
mod grace;
pub mod pod_shape;
pub mod rbac;
pub mod reader_registry;
pub mod service_account;
pub mod sink_secrets;
pub mod starting_replicas;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

pub use config::{config_hash, reader_view, render_source};
pub use grace::{ShutdownPlan, shutdown_plan};

use crate::error::{Error, Result};
use crate::names;
use crate::validate::Validated;

/// Everything one source needs in its namespace. `spec.replicas` of the Deployment is left unset:
/// the autoscaler owns it (field manager `sluice-scaler`); the apply that creates the Deployment
/// names `starting_replicas` and hands the field over (see `starting_replicas`).
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    pub config_map: ConfigMap,
    /// This source's entry in the namespace's register of reader accounts (`sluice-readers`),
    /// applied under the source's own field manager.
    pub reader_registry: reader_registry::Entry,
    /// `None` when the source runs as an existing ServiceAccount (`spec.reader.serviceAccount`).
    pub service_account: Option<ServiceAccount>,
    /// Binds the shared reader ClusterRole (build/rbac.rs) to the readers' account.
    pub role_binding: RoleBinding,
    pub deployment: Deployment,
    /// The replicas a new Deployment starts with, before the autoscaler's first reading.
    pub starting_replicas: i32,
    pub disruption_budget: PodDisruptionBudget,
    /// Hash of the rendered configuration; also on the pod template, so a change rolls the pods.
    pub config_hash: String,
}

/// Builds the children of a validated source.
pub fn build(valid: &Validated<'_>) -> Result<Children> {
    let owner = valid.source.controller_owner_ref(&()).ok_or_else(|| {
        Error::Build(format!(
            "source {}/{} has no uid yet; it cannot own children",
            valid.namespace, valid.name
        ))
    })?;
    let rendered = render_source(valid)?;
    let config_hash = config_hash(&config::render_for_hash(valid)?);
    let mut role_binding = rbac::role_binding(valid, &owner);
    service_account::bind_to_account(&mut role_binding, &service_account::account_name(valid));
    Ok(Children {
        config_map: config::config_map(valid, &owner, rendered),
        reader_registry: reader_registry::entry(valid),
        service_account: service_account::service_account(valid, &owner),
        role_binding,
        deployment: deployment::deployment(valid, &owner, &config_hash),
        starting_replicas: starting_replicas::starting_replicas(&valid.source.spec),
        disruption_budget: disruption::disruption_budget(valid, &owner),
        config_hash,
    })
}

/// Metadata shared by every child: name, namespace, labels, owner.
fn child_meta(valid: &Validated<'_>, owner: &OwnerReference, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(valid.namespace.clone()),
        labels: Some(names::labels(&valid.name)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "shaping_tests.rs"]
mod shaping_tests;
