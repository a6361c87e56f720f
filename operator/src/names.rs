//! Names, labels and field managers of everything the operator writes.
//!
//! Why one file: the reader pods, the checkpoint coordinator, the autoscaler and the test harness
//! all find these objects by name or label (the ConfigMaps: `protocol/PROTOCOL.md`); a second spelling
//! anywhere would silently orphan objects, so every spelling lives here.

use std::collections::BTreeMap;

/// Field manager of the reconciler: children and the status fields it computes.
pub const FIELD_MANAGER: &str = "sluice-operator";
/// Field manager the autoscaler uses for `spec.replicas` of the reader Deployment (never ours).
pub const SCALER_FIELD_MANAGER: &str = "sluice-scaler";
/// Name of the reader container, and of the reader binary it runs.
pub const READER_CONTAINER: &str = "reader";
pub const READER_COMMAND: &str = "sluice-reader";
/// Key of the rendered source in the config ConfigMap, and where the pod mounts it.
pub const CONFIG_KEY: &str = "source.yaml";
pub const CONFIG_MOUNT_DIR: &str = "/etc/sluice";
/// Pod-template annotation whose change rolls the readers when their configuration changes.
pub const CONFIG_HASH_ANNOTATION: &str = "sluice.dev/config-hash";
/// Pod-template annotation whose change rolls the readers when the annotations of the
/// ServiceAccount the operator creates for them change (the IRSA role is fixed at pod admission).
pub const SERVICE_ACCOUNT_HASH_ANNOTATION: &str = "sluice.dev/service-account-hash";
/// Admin port of the reader (metrics and probes).
pub const READER_ADMIN_PORT: i32 = 9090;

/// Labels that select a source's reader pods. The Deployment selector is immutable, so this set
/// must never grow.
pub fn selector_labels(source: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sluice-reader".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), source.to_owned()),
        ("sluice.dev/source".to_owned(), source.to_owned()),
    ])
}

/// Labels on every child object: the selector labels plus who manages them.
pub fn labels(source: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(source);
    labels.insert("app.kubernetes.io/managed-by".to_owned(), FIELD_MANAGER.to_owned());
    labels
}

/// `<source>-config`: the ConfigMap holding `source.yaml`.
pub fn config_map_name(source: &str) -> String {
    format!("{source}-config")
}

/// `<source>-reader`: the Deployment, ServiceAccount and PodDisruptionBudget share this name.
pub fn reader_name(source: &str) -> String {
    format!("{source}-reader")
}

/// The ClusterRole every source's readers are bound to in their own namespace, shipped with the
/// operator (deploy/operator/reader-clusterrole.yaml); the operator may `bind` this one by name.
pub const READER_CLUSTER_ROLE: &str = "sluice-reader";

/// `<source>-sluice-reader`: the RoleBinding of `READER_CLUSTER_ROLE` to the source's readers.
/// Not `reader_name`: releases before the shared ClusterRole bound a per-source Role under that
/// name, and a binding's `roleRef` cannot change (deploy/README.md, "Upgrading").
pub fn reader_binding_name(source: &str) -> String {
    format!("{source}-{READER_CLUSTER_ROLE}")
}

/// The ConfigMap, one per namespace, that registers the reader ServiceAccounts of that namespace's
/// sources for the admission policy (build/reader_registry.rs). The name is the policy binding's
/// `paramRef.name` in deploy/policy/.
pub const READER_REGISTRY: &str = "sluice-readers";

/// `<source>-checkpoint`: written by the checkpoint coordinator, read by the readers.
pub fn checkpoint_name(source: &str) -> String {
    format!("{source}-checkpoint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_names_follow_the_contract() {
        assert_eq!(config_map_name("orders"), "orders-config");
        assert_eq!(reader_name("orders"), "orders-reader");
        assert_eq!(checkpoint_name("orders"), "orders-checkpoint");
    }

    #[test]
    fn selector_is_a_subset_of_the_labels() {
        let all = labels("orders");
        for (k, v) in selector_labels("orders") {
            assert_eq!(all.get(&k), Some(&v));
        }
        assert_eq!(all["sluice.dev/source"], "orders");
    }
}
