//! The autoscaler's view of every source's reader Deployment and reader leases: two watch-fed
//! caches shared by all the scaling loops.
//!
//! Why caches and not reads: each interval needs its source's Deployment (replicas, and whether the
//! scaler has sized it) and its readers' leases (drain rate and message ages). Read afresh, that is
//! a GET and a LIST per source per interval: about 4,000 requests a minute for a thousand idle
//! sources, most of the operator's CPU and much of the API server's load (BENCHMARKS.md, "Many
//! sources on one operator"). A watch costs one list at start and one event per change, and the
//! Deployments a fleet of idle sources has rarely change.
//!
//! What is kept: a Deployment is pruned to its metadata (field managers without their field sets),
//! `spec.replicas` and nothing else, since that is all the scaler reads; leases are kept whole
//! (their data is the readers' reports). How stale: a watch event arrives within milliseconds of the
//! write, and the scaler's own replica writes come back through it before its next interval. While a
//! watch fails the caches keep what they last saw; the scaler's writes still go to the API server
//! and fail there, which is what the interval's WARN line reports.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use sluice_protocol::SOURCE_LABEL;
use tokio_util::sync::CancellationToken;

use super::drain::all_leases_selector;
use crate::names::{FIELD_MANAGER, reader_name};
use crate::scope::Scope;

/// The reader Deployments and the reader leases, as last watched.
#[derive(Clone)]
pub struct Children {
    deployments: Store<Deployment>,
    leases: Store<ConfigMap>,
}

impl Children {
    /// Starts the two watches (on the current Tokio runtime); they end with `stop`.
    pub fn watch(client: &Client, scope: &Scope, stop: &CancellationToken) -> Self {
        let managed =
            watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
        let (deployments, writer) = reflector::store();
        let events = watcher(scope.api(client), managed).default_backoff().modify(prune).reflect(writer);
        let stale = "replicas are decided from the reader Deployments last seen";
        tokio::spawn(crate::cache_watch::follow(
            events,
            "scaler",
            "reader Deployments",
            stale,
            stop.clone(),
            |_| {},
        ));

        let leases_only = watcher::Config::default().labels(&all_leases_selector());
        let (leases, writer) = reflector::store();
        let events = watcher(scope.api(client), leases_only).default_backoff().reflect(writer);
        let stale = "drain rates are read from the leases last seen";
        tokio::spawn(crate::cache_watch::follow(
            events,
            "scaler",
            "reader leases",
            stale,
            stop.clone(),
            |_| {},
        ));
        Self { deployments, leases }
    }

    /// Caches filled by hand (tests): `Init`, the objects, `InitDone`.
    #[cfg(test)]
    pub fn of(deployments: Vec<Deployment>, leases: Vec<ConfigMap>) -> Self {
        fn filled<K>(objects: Vec<K>) -> Store<K>
        where
            K: kube::Resource<DynamicType = ()> + Clone + 'static,
        {
            let (store, mut writer) = reflector::store();
            writer.apply_watcher_event(&watcher::Event::Init);
            for object in objects {
                writer.apply_watcher_event(&watcher::Event::InitApply(object));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            store
        }
        let pruned = deployments.into_iter().map(|mut deployment| {
            prune(&mut deployment);
            deployment
        });
        Self { deployments: filled(pruned.collect()), leases: filled(leases) }
    }

    /// Waits until both caches hold their first list; `false` if a watch ended first (shutdown).
    pub async fn ready(&self) -> bool {
        self.deployments.wait_until_ready().await.is_ok() && self.leases.wait_until_ready().await.is_ok()
    }

    /// `<source>-reader` in `namespace`, if the reconciler has made it.
    pub fn deployment(&self, namespace: &str, source: &str) -> Option<Arc<Deployment>> {
        self.deployments.get(&ObjectRef::new(&reader_name(source)).within(namespace))
    }

    /// The leases of `source`'s readers in `namespace`.
    pub fn leases(&self, namespace: &str, source: &str) -> Vec<Arc<ConfigMap>> {
        self.leases.state_filter(|lease| {
            lease.namespace().as_deref() == Some(namespace)
                && lease.labels().get(SOURCE_LABEL).map(String::as_str) == Some(source)
        })
    }
}

/// What the scaler reads of a Deployment, and nothing else (a thousand pod templates and statuses
/// would otherwise sit in memory unread).
fn prune(deployment: &mut Deployment) {
    let replicas = deployment.spec.as_ref().and_then(|spec| spec.replicas);
    deployment.spec = Some(DeploymentSpec { replicas, ..DeploymentSpec::default() });
    deployment.status = None;
    deployment.metadata.annotations = None;
    crate::cache_watch::without_field_sets(deployment);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DeploymentStatus;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    use super::*;

    fn lease(namespace: &str, source: &str, pod: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{source}-lease-{pod}")),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(SOURCE_LABEL.to_owned(), source.to_owned())])),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_source_sees_only_its_own_leases_in_its_own_namespace() {
        let leases = vec![
            lease("shop", "orders", "a"),
            lease("shop", "orders", "b"),
            lease("shop", "orders-eu", "a"),
            lease("billing", "orders", "a"),
        ];
        let children = Children::of(Vec::new(), leases);
        let mut names: Vec<String> = children.leases("shop", "orders").iter().map(|l| l.name_any()).collect();
        names.sort();
        assert_eq!(names, ["orders-lease-a", "orders-lease-b"]);
        assert!(children.leases("shop", "payments").is_empty());
    }

    #[test]
    fn a_cached_deployment_keeps_replicas_and_managers_only() {
        let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "orders-reader", "namespace": "shop",
                "annotations": { "big": "x" },
                "managedFields": [{ "manager": "sluice-scaler", "operation": "Update", "fieldsType": "FieldsV1",
                                    "fieldsV1": { "f:spec": { "f:replicas": {} } } }],
            },
            "spec": { "replicas": 3, "selector": {}, "template": { "spec": { "containers": [{ "name": "reader" }] } } },
        }))
        .unwrap();
        deployment.status = Some(DeploymentStatus { replicas: Some(3), ..DeploymentStatus::default() });
        let children = Children::of(vec![deployment], Vec::new());
        let cached = children.deployment("shop", "orders").expect("cached");
        assert_eq!(cached.spec.as_ref().and_then(|s| s.replicas), Some(3));
        assert!(cached.spec.as_ref().is_some_and(|s| s.template.spec.is_none()));
        assert!(cached.status.is_none() && cached.metadata.annotations.is_none());
        let managers = cached.metadata.managed_fields.as_ref().unwrap();
        assert_eq!(managers[0].manager.as_deref(), Some("sluice-scaler"));
        assert!(managers[0].fields_v1.is_none());
        assert!(children.deployment("billing", "orders").is_none());
    }
}
