//! Store semantics, tested without HTTP.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::controlplane::patch::PatchKind;

fn rt(store: &Store, group: &str, version: &str, plural: &str) -> ResourceType {
    store.registry().find(group, version, plural).cloned().expect("type is registered")
}

fn cm(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": "a"}}, "data": {"k": "v"}})
}

fn deploy(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
           "status": {"replicas": 9}})
}

fn rv_of(v: &Value) -> u64 {
    meta_str(v, "resourceVersion").unwrap().parse().unwrap()
}

#[test]
fn create_stamps_metadata_and_refuses_duplicates() {
    let mut s = Store::new(100);
    let t = rt(&s, "", "v1", "configmaps");
    let o = s.create(&t, "default", cm("a")).unwrap();
    assert_eq!(o["apiVersion"], "v1");
    assert_eq!(o["kind"], "ConfigMap");
    assert_eq!(o["metadata"]["namespace"], "default");
    assert!(meta_str(&o, "uid").is_some() && meta_str(&o, "creationTimestamp").is_some());
    assert_eq!(rv_of(&o), s.resource_version());
    let e = s.create(&t, "default", cm("a")).unwrap_err();
    assert_eq!((e.code, e.reason), (409, "AlreadyExists"));
    assert_eq!(s.get(&t, "other", "a").unwrap_err().reason, "NotFound");
    let generated = s.create(&t, "default", json!({"metadata": {"generateName": "x-"}})).unwrap();
    assert!(meta_str(&generated, "name").unwrap().starts_with("x-"));
}

#[test]
fn replace_with_stale_resource_version_conflicts() {
    let mut s = Store::new(100);
    let t = rt(&s, "", "v1", "configmaps");
    let first = s.create(&t, "default", cm("a")).unwrap();
    let mut second = first.clone();
    second["data"]["k"] = json!("w");
    let stored = s.replace(&t, "default", "a", second, Subresource::Main).unwrap();
    assert!(rv_of(&stored) > rv_of(&first));
    let mut stale = first.clone();
    stale["data"]["k"] = json!("x");
    let e = s.replace(&t, "default", "a", stale, Subresource::Main).unwrap_err();
    assert_eq!((e.code, e.reason), (409, "Conflict"));
    let e = s.patch(
        &t,
        "default",
        "a",
        &PatchKind::Merge,
        &json!({"metadata": {"resourceVersion": "1"}}),
        Subresource::Main,
    );
    assert_eq!(e.unwrap_err().reason, "Conflict");
}

#[test]
fn generation_counts_spec_changes_and_status_is_split() {
    let mut s = Store::new(100);
    let t = rt(&s, "apps", "v1", "deployments");
    let o = s.create(&t, "default", deploy("d")).unwrap();
    assert_eq!(o["metadata"]["generation"], 1);
    assert!(o.get("status").is_none(), "create ignores status of status-subresource types");
    let patched = s
        .patch(
            &t,
            "default",
            "d",
            &PatchKind::Merge,
            &json!({"spec": {"replicas": 3}, "status": {"replicas": 3}}),
            Subresource::Main,
        )
        .unwrap();
    assert_eq!(patched["metadata"]["generation"], 2);
    assert!(patched.get("status").is_none(), "main endpoint ignores status");
    let st = s
        .patch(
            &t,
            "default",
            "d",
            &PatchKind::Merge,
            &json!({"status": {"readyReplicas": 3}, "spec": {"replicas": 7}}),
            Subresource::Status,
        )
        .unwrap();
    assert_eq!(st["status"]["readyReplicas"], 3);
    assert_eq!(st["spec"]["replicas"], 3, "status endpoint ignores spec");
    assert_eq!(st["metadata"]["generation"], 2, "status changes do not bump generation");
    let labelled = s
        .patch(
            &t,
            "default",
            "d",
            &PatchKind::Merge,
            &json!({"metadata": {"labels": {"x": "y"}}}),
            Subresource::Main,
        )
        .unwrap();
    assert_eq!(labelled["metadata"]["generation"], 2, "metadata changes do not bump generation");
}

#[test]
fn a_write_that_changes_nothing_is_not_recorded() {
    let mut s = Store::new(100);
    let t = rt(&s, "", "v1", "configmaps");
    let o = s.create(&t, "default", cm("a")).unwrap();
    let before = s.resource_version();
    let same = s
        .patch(&t, "default", "a", &PatchKind::Merge, &json!({"data": {"k": "v"}}), Subresource::Main)
        .unwrap();
    assert_eq!(s.resource_version(), before);
    assert_eq!(meta_str(&same, "resourceVersion"), meta_str(&o, "resourceVersion"));
}

#[test]
fn json_and_strategic_patches_apply() {
    let mut s = Store::new(100);
    let t = rt(&s, "apps", "v1", "deployments");
    s.create(&t, "default", deploy("d")).unwrap();
    let ops = json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]);
    let o = s.patch(&t, "default", "d", &PatchKind::Json, &ops, Subresource::Main).unwrap();
    assert_eq!(o["spec"]["replicas"], 5);
    let smp = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let o = s.patch(&t, "default", "d", &PatchKind::StrategicMerge, &smp, Subresource::Main).unwrap();
    assert_eq!(o["spec"]["template"]["spec"]["containers"], json!([{"name": "c", "image": "i"}]));
}

#[test]
fn list_filters_by_namespace_and_selectors() {
    let mut s = Store::new(100);
    let t = rt(&s, "", "v1", "configmaps");
    s.create(&t, "default", cm("a")).unwrap();
    s.create(&t, "other", cm("b")).unwrap();
    s.create(&t, "default", json!({"metadata": {"name": "c", "labels": {"app": "z"}}})).unwrap();
    let names = |ns: Option<&str>, l: Option<&str>, f: Option<&str>| -> Vec<String> {
        s.list(&t, ns, &Selectors::parse(l, f).unwrap())
            .0
            .iter()
            .map(|o| meta_str(o, "name").unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(Some("default"), None, None), vec!["a", "c"]);
    assert_eq!(names(None, Some("app=a"), None), vec!["a", "b"]);
    assert_eq!(names(None, Some("app in (z)"), None), vec!["c"]);
    assert_eq!(names(None, None, Some("metadata.name=b")), vec!["b"]);
}

#[test]
fn deleting_an_owner_collects_dependents_recursively() {
    let mut s = Store::new(100);
    let d = rt(&s, "apps", "v1", "deployments");
    let c = rt(&s, "", "v1", "configmaps");
    let owner = s.create(&d, "default", deploy("d")).unwrap();
    let owned = |name: &str, uid: &str| json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": uid}]}});
    let child = s.create(&c, "default", owned("child", meta_str(&owner, "uid").unwrap())).unwrap();
    s.create(&c, "default", owned("grandchild", meta_str(&child, "uid").unwrap())).unwrap();
    s.create(&c, "default", cm("bystander")).unwrap();
    s.delete(&d, "default", "d", Propagation::Background, None).unwrap();
    assert_eq!(s.get(&c, "default", "child").unwrap_err().code, 404);
    assert_eq!(s.get(&c, "default", "grandchild").unwrap_err().code, 404);
    assert!(s.get(&c, "default", "bystander").is_ok());
}

#[test]
fn an_object_written_with_only_absent_owners_is_collected_as_a_real_collector_would() {
    let mut s = Store::new(100);
    let c = rt(&s, "", "v1", "configmaps");
    let owner = s.create(&c, "default", cm("o")).unwrap();
    let live = meta_str(&owner, "uid").unwrap().to_owned();
    let owned = |name: &str, uids: &[&str]| {
        let refs: Vec<Value> = uids.iter().map(|u| json!({"uid": u, "name": "o", "kind": "X"})).collect();
        json!({"metadata": {"name": name, "ownerReferences": refs}})
    };
    let before = s.resource_version();
    let created = s.create(&c, "default", owned("late", &["gone-uid"])).unwrap();
    assert_eq!(created["metadata"]["name"], "late", "the create itself succeeds");
    assert_eq!(s.get(&c, "default", "late").unwrap_err().code, 404);
    let seen: Vec<_> = s
        .history()
        .after(before)
        .unwrap()
        .map(|e| (e.kind, meta_str(&e.object, "name").map(str::to_owned)))
        .collect();
    assert_eq!(
        seen,
        vec![(EventType::Added, Some("late".into())), (EventType::Deleted, Some("late".into()))]
    );

    // One live owner among absent ones keeps the object, as in Kubernetes.
    s.create(&c, "default", owned("shared", &["gone-uid", &live])).unwrap();
    assert!(s.get(&c, "default", "shared").is_ok());

    // An update that points every reference at an absent owner collects it too.
    s.create(&c, "default", owned("moved", &[&live])).unwrap();
    let dangling = json!([{"op": "replace", "path": "/metadata/ownerReferences/0/uid", "value": "gone-uid"}]);
    s.patch(&c, "default", "moved", &PatchKind::Json, &dangling, Subresource::Main).unwrap();
    assert_eq!(s.get(&c, "default", "moved").unwrap_err().code, 404);
    assert!(s.get(&c, "default", "o").is_ok());
}

#[test]
fn orphan_propagation_keeps_dependents() {
    let mut s = Store::new(100);
    let c = rt(&s, "", "v1", "configmaps");
    let owner = s.create(&c, "default", cm("o")).unwrap();
    let uid = meta_str(&owner, "uid").unwrap();
    s.create(
        &c,
        "default",
        json!({"metadata": {"name": "k", "ownerReferences": [{"uid": uid, "name": "o"}]}}),
    )
    .unwrap();
    s.delete(&c, "default", "o", Propagation::Orphan, None).unwrap();
    let kept = s.get(&c, "default", "k").unwrap();
    assert_eq!(kept["metadata"]["ownerReferences"], json!([]));
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let mut s = Store::new(100);
    let c = rt(&s, "", "v1", "configmaps");
    s.create(&c, "default", json!({"metadata": {"name": "f", "finalizers": ["x/y"]}})).unwrap();
    let marked = s.delete(&c, "default", "f", Propagation::Background, None).unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(s.get(&c, "default", "f").is_ok());
    s.patch(
        &c,
        "default",
        "f",
        &PatchKind::Merge,
        &json!({"metadata": {"finalizers": null}}),
        Subresource::Main,
    )
    .unwrap();
    assert_eq!(s.get(&c, "default", "f").unwrap_err().code, 404);
}

#[test]
fn delete_precondition_must_match() {
    let mut s = Store::new(100);
    let c = rt(&s, "", "v1", "configmaps");
    s.create(&c, "default", cm("a")).unwrap();
    assert_eq!(
        s.delete(&c, "default", "a", Propagation::Background, Some("1")).unwrap_err().reason,
        "Conflict"
    );
}

fn apply(s: &mut Store, t: &ResourceType, manager: &str, force: bool, body: Value) -> Result<Value> {
    s.patch(t, "default", "d", &PatchKind::Apply { manager: manager.into(), force }, &body, Subresource::Main)
}

#[test]
fn apply_creates_merges_and_records_managers() {
    let mut s = Store::new(100);
    let t = rt(&s, "apps", "v1", "deployments");
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"a": "1"}},
                      "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}});
    let created = apply(&mut s, &t, "op", false, body.clone()).unwrap();
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "op");
    assert_eq!(created["metadata"]["managedFields"][0]["operation"], "Apply");
    let scaled =
        apply(&mut s, &t, "scaler", false, json!({"metadata": {"name": "d"}, "spec": {"replicas": 4}}))
            .unwrap();
    assert_eq!(scaled["spec"]["replicas"], 4);
    assert_eq!(scaled["spec"]["template"]["spec"]["containers"][0]["name"], "c");
    // The operator re-applies without replicas: the scaler's field stays.
    let again = apply(&mut s, &t, "op", false, body).unwrap();
    assert_eq!(again["spec"]["replicas"], 4);
    assert_eq!(again["metadata"]["managedFields"].as_array().unwrap().len(), 2);
}

#[test]
fn apply_conflicts_unless_forced_and_drops_unapplied_fields() {
    let mut s = Store::new(100);
    let t = rt(&s, "apps", "v1", "deployments");
    apply(
        &mut s,
        &t,
        "op",
        false,
        json!({"metadata": {"name": "d", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}}),
    )
    .unwrap();
    let e = apply(&mut s, &t, "scaler", false, json!({"metadata": {"name": "d"}, "spec": {"replicas": 3}}))
        .unwrap_err();
    assert_eq!((e.code, e.reason), (409, "Conflict"));
    assert_eq!(e.causes[0].field, ".spec.replicas");
    // Same value is shared ownership, not a conflict.
    apply(&mut s, &t, "other", false, json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}})).unwrap();
    let forced =
        apply(&mut s, &t, "scaler", true, json!({"metadata": {"name": "d"}, "spec": {"replicas": 3}}))
            .unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    // "op" stops applying label b and replicas: b is removed, replicas (now the scaler's) stays.
    let stale = json!({"metadata": {"name": "d", "resourceVersion": "1"}, "spec": {"replicas": 3}});
    assert_eq!(apply(&mut s, &t, "scaler", false, stale).unwrap_err().reason, "Conflict");
    let o = apply(&mut s, &t, "op", false, json!({"metadata": {"name": "d", "labels": {"a": "1"}}})).unwrap();
    assert_eq!(o["metadata"]["labels"], json!({"a": "1"}));
    assert_eq!(o["spec"]["replicas"], 3);
}

#[test]
fn status_apply_touches_only_status() {
    let mut s = Store::new(100);
    let t = rt(&s, "apps", "v1", "deployments");
    s.create(&t, "default", deploy("d")).unwrap();
    let kind = PatchKind::Apply { manager: "ctl".into(), force: true };
    let body = json!({"metadata": {"name": "d"}, "status": {"readyReplicas": 1}, "spec": {"replicas": 9}});
    let o = s.patch(&t, "default", "d", &kind, &body, Subresource::Status).unwrap();
    assert_eq!(o["status"]["readyReplicas"], 1);
    assert_eq!(o["spec"]["replicas"], 1);
    assert_eq!(o["metadata"]["managedFields"][0]["subresource"], "status");
}

#[test]
fn history_replays_changes_and_expires_old_versions() {
    let mut s = Store::new(3);
    let c = rt(&s, "", "v1", "configmaps");
    let start = s.resource_version();
    for i in 0..2 {
        s.create(&c, "default", cm(&format!("c{i}"))).unwrap();
    }
    let kinds: Vec<EventType> = s.history().after(start).unwrap().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![EventType::Added, EventType::Added]);
    s.delete(&c, "default", "c0", Propagation::Background, None).unwrap();
    s.create(&c, "default", cm("c9")).unwrap();
    assert_eq!(s.history().after(start).err().unwrap().code, 410);
}

#[test]
fn crds_register_kinds_and_validators_refuse_invalid_objects() {
    let mut s = Store::new(100);
    let crd_t = rt(&s, "apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let crd = json!({"metadata": {"name": "sqssources.sluice.dev"}, "spec": {"group": "sluice.dev", "scope": "Namespaced",
        "names": {"plural": "sqssources", "kind": "SqsSource"},
        "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
    let created = s.create(&crd_t, "", crd).unwrap();
    assert_eq!(created["status"]["conditions"][1]["type"], "Established");
    s.set_validator(
        "sluice.dev",
        "SqsSource",
        Arc::new(|o: &Value| {
            if o.pointer("/spec/queue").is_some() {
                Ok(())
            } else {
                Err(vec![Cause { field: "spec.queue".into(), message: "required".into() }])
            }
        }),
    );
    let t = rt(&s, "sluice.dev", "v1alpha1", "sqssources");
    let e = s.create(&t, "default", json!({"metadata": {"name": "bad"}, "spec": {}})).unwrap_err();
    assert_eq!((e.code, e.reason), (422, "Invalid"));
    assert_eq!(e.causes[0].field, "spec.queue");
    s.create(&t, "default", json!({"metadata": {"name": "good"}, "spec": {"queue": "q"}})).unwrap();
    s.delete(&crd_t, "", "sqssources.sluice.dev", Propagation::Background, None).unwrap();
    assert!(s.registry().find("sluice.dev", "v1alpha1", "sqssources").is_none());
    assert!(s.list(&t, None, &Selectors::default()).0.is_empty());
}
