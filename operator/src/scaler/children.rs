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
    /// `Some(true)` once both caches hold their first list, `Some(false)` if a watch ended first.
    ready: tokio::sync::watch::Receiver<Option<bool>>,
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
        Self::of_stores(deployments, leases)
    }

    /// Why one waiter and a channel: kube-runtime's `Store::wait_until_ready` wakes only the last
    /// of several tasks waiting on it at once (its one-shot channel keeps one waker), and every
    /// scaling loop started with the operator waits for these caches: all but one waited for good,
    /// and their sources were never scaled (found by a 1,000-source run whose busy sources were
    /// among the first listed).
    fn of_stores(deployments: Store<Deployment>, leases: Store<ConfigMap>) -> Self {
        let (tell, ready) = tokio::sync::watch::channel(None);
        let (d, l) = (deployments.clone(), leases.clone());
        tokio::spawn(async move {
            let ready = d.wait_until_ready().await.is_ok() && l.wait_until_ready().await.is_ok();
            // No receiver left: the operator is stopping.
            let _ = tell.send(Some(ready));
        });
        Self { deployments, leases, ready }
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
        let (_, ready) = tokio::sync::watch::channel(Some(true));
        Self { deployments: filled(pruned.collect()), leases: filled(leases), ready }
    }

    /// Waits until both caches hold their first list; `false` if a watch ended first (shutdown).
    /// Any number of loops may wait at once.
    pub async fn ready(&self) -> bool {
        let mut ready = self.ready.clone();
        ready.wait_for(Option::is_some).await.is_ok_and(|r| r.unwrap_or(false))
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
    #[tokio::test]
    async fn every_loop_waiting_for_the_first_lists_goes_on_when_they_come() {
        let (deployments, mut deployments_writer) = reflector::store::<Deployment>();
        let (leases, mut leases_writer) = reflector::store::<ConfigMap>();
        let children = Children::of_stores(deployments, leases);
        let waiting: Vec<_> = (0..20)
            .map(|_| {
                let children = children.clone();
                tokio::spawn(async move { children.ready().await })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        for writer_event in [watcher::Event::Init, watcher::Event::InitDone] {
            deployments_writer.apply_watcher_event(&writer_event);
        }
        for writer_event in [watcher::Event::Init, watcher::Event::InitDone] {
            leases_writer.apply_watcher_event(&writer_event);
        }
        let all = futures::future::join_all(waiting);
        let woke = tokio::time::timeout(std::time::Duration::from_secs(5), all).await;
        let Ok(results) = woke else { panic!("some loops were never woken") };
        assert!(results.into_iter().all(|r| r.is_ok_and(|ready| ready)));
    }

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
