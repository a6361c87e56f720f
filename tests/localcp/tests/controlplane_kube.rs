//! The local control plane driven by a real `kube::Client` and kube-runtime's watcher, as the operator
//! and readers will drive it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use sluice_localcp::controlplane::error::Cause;
use sluice_localcp::controlplane::{Config, ControlPlane};

const STEP: Duration = Duration::from_secs(10);

async fn start(history: usize) -> ControlPlane {
    let config = Config { history, bookmark_interval: Duration::from_millis(200), ..Config::default() };
    ControlPlane::start(config).await.expect("control plane starts")
}

fn cm(name: &str, app: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
    c.data = Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    c
}

fn api_code<T: std::fmt::Debug>(r: kube::Result<T>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_selectors_and_conflicts() {
    let cp = start(1000).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    let pp = PostParams::default();
    let a = api.create(&pp, &cm("a", "web")).await.unwrap();
    api.create(&pp, &cm("b", "db")).await.unwrap();
    assert_eq!(api_code(api.create(&pp, &cm("a", "web")).await), (409, "AlreadyExists".into()));
    assert_eq!(api_code(api.get("nope").await), (404, "NotFound".into()));
    assert_eq!(api.get("a").await.unwrap().uid(), a.uid());

    let names =
        |l: &kube::core::ObjectList<ConfigMap>| l.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>();
    assert_eq!(names(&api.list(&ListParams::default().labels("app=web")).await.unwrap()), vec!["a"]);
    assert_eq!(
        names(&api.list(&ListParams::default().labels("app in (web,db)")).await.unwrap()),
        vec!["a", "b"]
    );
    assert_eq!(names(&api.list(&ListParams::default().fields("metadata.name=b")).await.unwrap()), vec!["b"]);

    let mut fresh = api.get("a").await.unwrap();
    fresh.data = Some(BTreeMap::from([("k".to_owned(), "w".to_owned())]));
    api.replace("a", &pp, &fresh).await.unwrap();
    let mut stale = a.clone();
    stale.data = Some(BTreeMap::from([("k".to_owned(), "x".to_owned())]));
    assert_eq!(api_code(api.replace("a", &pp, &stale).await), (409, "Conflict".into()));

    api.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(api.get("b").await), (404, "NotFound".into()));
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn watch_from_version_with_bookmarks_and_expiry() {
    let cp = start(5).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    let pp = PostParams::default();
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = api.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
    api.create(&pp, &cm("w1", "x")).await.unwrap();
    api.patch("w1", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    let mut bookmark = false;
    while seen.len() < 3 || !bookmark {
        let ev = tokio::time::timeout(STEP, stream.try_next()).await.unwrap().unwrap().expect("stream open");
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.data.unwrap()["k"])),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.name_any())),
            WatchEvent::Bookmark(b) => bookmark = !b.metadata.resource_version.is_empty(),
            WatchEvent::Error(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(seen, vec!["ADDED w1", "MODIFIED 2", "DELETED w1"]);

    // Push the initial version out of the 5-event history: the watch answers 410 Expired.
    for i in 0..6 {
        api.create(&pp, &cm(&format!("f{i}"), "x")).await.unwrap();
    }
    let mut old = api.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
    match tokio::time::timeout(STEP, old.try_next()).await.unwrap().unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn watch_timeout_ends_the_stream() {
    let cp = start(100).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let stream = api.watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv).await.unwrap();
    let events: Vec<_> =
        tokio::time::timeout(STEP, stream.collect::<Vec<_>>()).await.expect("ends after ~1 s");
    assert!(events.is_empty());
    cp.shutdown().await.unwrap();
}

fn deployment(name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "i", "command": ["sleep"]}]}}}})
}

#[tokio::test]
async fn server_side_apply_status_and_generation() {
    let cp = start(100).await;
    let api: Api<Deployment> = Api::namespaced(cp.client().unwrap(), "default");
    let op = PatchParams::apply("sluice-operator");
    let d = api.patch("d", &op, &Patch::Apply(deployment("d"))).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(d.managed_fields()[0].manager.as_deref(), Some("sluice-operator"));

    let scale = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 3}});
    let d = api.patch("d", &PatchParams::apply("sluice-scaler"), &Patch::Apply(&scale)).await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(d.metadata.generation, Some(2));

    // The operator re-applies its unchanged configuration: nothing changes, not even the resourceVersion.
    let again = api.patch("d", &op, &Patch::Apply(deployment("d"))).await.unwrap();
    assert_eq!(again.resource_version(), d.resource_version());

    // Another manager claiming replicas with a different value conflicts unless forced.
    let grab = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}});
    assert_eq!(api_code(api.patch("d", &PatchParams::apply("thief"), &Patch::Apply(&grab)).await).0, 409);
    let forced = api.patch("d", &PatchParams::apply("thief").force(), &Patch::Apply(&grab)).await.unwrap();
    assert_eq!(forced.spec.unwrap().replicas, Some(1));

    let status =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"readyReplicas": 1, "replicas": 1}});
    let s =
        api.patch_status("d", &PatchParams::apply("kubelet").force(), &Patch::Apply(&status)).await.unwrap();
    assert_eq!(s.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(s.metadata.generation, Some(3), "status does not bump generation");
    let ignored = api
        .patch("d", &PatchParams::default(), &Patch::Merge(json!({"status": {"readyReplicas": 7}})))
        .await
        .unwrap();
    assert_eq!(ignored.status.unwrap().ready_replicas, Some(1), "main endpoint ignores status");
    let via_get = api.get_status("d").await.unwrap();
    assert_eq!(via_get.status.unwrap().replicas, Some(1));
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn deleting_an_owner_collects_its_children() {
    let cp = start(100).await;
    let client = cp.client().unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner = deploys.patch("o", &PatchParams::apply("t"), &Patch::Apply(deployment("o"))).await.unwrap();
    let mut child = cm("child", "x");
    child.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    cms.create(&PostParams::default(), &cm("free", "x")).await.unwrap();
    deploys.delete("o", &DeleteParams::foreground()).await.unwrap();
    assert_eq!(api_code(cms.get("child").await).0, 404);
    assert!(cms.get("free").await.is_ok());
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn kube_runtime_watcher_lists_then_follows() {
    let cp = start(100).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("before", "x")).await.unwrap();
    let mut names =
        watcher(api.clone(), watcher::Config::default()).applied_objects().map_ok(|o| o.name_any()).boxed();
    let first = tokio::time::timeout(STEP, names.try_next()).await.unwrap().unwrap();
    assert_eq!(first.as_deref(), Some("before"));
    for n in ["after1", "after2"] {
        api.create(&PostParams::default(), &cm(n, "x")).await.unwrap();
        let got = tokio::time::timeout(STEP, names.try_next()).await.unwrap().unwrap();
        assert_eq!(got.as_deref(), Some(n));
    }
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn kube_runtime_watcher_with_streaming_lists() {
    let cp = start(3).await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    let cfg = watcher::Config::default().streaming_lists();
    let mut names = watcher(api.clone(), cfg).applied_objects().map_ok(|o| o.name_any()).boxed();
    api.create(&PostParams::default(), &cm("s1", "x")).await.unwrap();
    let got = tokio::time::timeout(STEP, names.try_next()).await.unwrap().unwrap();
    assert_eq!(got.as_deref(), Some("s1"));
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn kubeconfig_file_reaches_the_server() {
    let cp = start(100).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    cp.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    assert_eq!(cfg.default_namespace, "default");
    let client = kube::Client::try_from(cfg).unwrap();
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    let groups = client.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().any(|g| g.name == "coordination.k8s.io"));
    cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn crds_register_kinds_and_validators_reject() {
    let cp = start(100).await;
    cp.set_validator("sluice.dev", "SqsSource", |o| match o.pointer("/spec/queues") {
        Some(serde_json::Value::Array(q)) if !q.is_empty() => Ok(()),
        _ => {
            Err(vec![Cause { field: "spec.queues".into(), message: "at least one queue is required".into() }])
        }
    });
    let client = cp.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "sqssources.sluice.dev"},
        "spec": {"group": "sluice.dev", "scope": "Namespaced",
                 "names": {"plural": "sqssources", "singular": "sqssource", "kind": "SqsSource"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                               "subresources": {"status": {}}}]}}))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = kube::runtime::wait::await_condition(
        crds.clone(),
        "sqssources.sluice.dev",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(STEP, established).await.unwrap().unwrap();

    let ar = ApiResource {
        group: "sluice.dev".into(),
        version: "v1alpha1".into(),
        api_version: "sluice.dev/v1alpha1".into(),
        kind: "SqsSource".into(),
        plural: "sqssources".into(),
    };
    let sources: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let bad: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource",
        "metadata": {"name": "bad"}, "spec": {"queues": []}}))
        .unwrap();
    let err = sources.create(&PostParams::default(), &bad).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(s.message.contains("spec.queues"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    let good = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource", "metadata": {"name": "good"},
                      "spec": {"queues": [{"url": "q"}]}});
    let created = sources.patch("good", &PatchParams::apply("t"), &Patch::Apply(&good)).await.unwrap();
    assert_eq!(created.types.unwrap().kind, "SqsSource");
    crds.delete("sqssources.sluice.dev", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(sources.get("good").await).0, 404);
    cp.shutdown().await.unwrap();
}
