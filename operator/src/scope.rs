//! Which namespaces the operator serves: every one, or the one `--namespace` names.
//!
//! Every task that lists or watches sources (the reconciler, the autoscaler, the checkpoint
//! coordinator, sink health, replay) asks this one value for its API, so an operator told to serve
//! `team-a` never scales, commits or writes status for a source elsewhere: two operators serving two
//! namespaces each with the namespaced RBAC of their own leave each other's sources alone.

use kube::{Api, Client, Resource};

/// Which namespaces the operator serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespace(String),
}

impl Scope {
    /// From `--namespace`.
    pub fn from_flag(namespace: Option<String>) -> Self {
        namespace.map_or(Self::All, Self::Namespace)
    }

    /// The API of a namespaced kind within the scope.
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        match self {
            Self::All => Api::all(client.clone()),
            Self::Namespace(ns) => Api::namespaced(client.clone(), ns),
        }
    }
}
