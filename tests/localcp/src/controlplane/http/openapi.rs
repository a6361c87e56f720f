//! OpenAPI documents: what `kubectl apply` (validation on) and `kubectl explain` read.
//!
//! kubectl reads `/openapi/v3`, an index of one document per group version, then that group version's
//! document. For apply it looks for a PATCH operation of the object's kind that takes the
//! `fieldValidation` query parameter; finding one, it leaves validation to the server (`Strict`), which
//! here checks a custom resource against its CRD's schema ([`unknown_fields`]). For explain it walks the
//! schema in `components.schemas` tagged with the kind's `x-kubernetes-group-version-kind`.
//!
//! A custom resource's schema is its CRD's `openAPIV3Schema`, so `kubectl explain sqssource.spec`
//! prints the field docs the CRD carries. Built-in kinds get a schema with their description only and
//! `x-kubernetes-preserve-unknown-fields` (the harness does not carry the Kubernetes API's schemas):
//! explain names them but lists no fields, and unknown fields in them are not refused.
//! `/openapi/v2` serves the same schemas as Swagger 2.0 `definitions`, in JSON only (a real server
//! prefers protobuf there; kubectl asks for either).

use serde_json::{Map, Value, json};

use super::super::registry::ResourceType;
use super::super::schema;
use super::super::store::Store;

/// The `/openapi/v3` index: one entry per served group version.
pub fn v3_index(store: &Store) -> Value {
    let hash = store.resource_version();
    let mut paths = Map::new();
    for rt in store.registry().all() {
        let key = gv_path(rt);
        paths.insert(key.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}));
    }
    json!({"paths": paths})
}

/// `api/v1` or `apis/GROUP/VERSION`.
fn gv_path(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        format!("api/{}", rt.version)
    } else {
        format!("apis/{}/{}", rt.group, rt.version)
    }
}

/// One group version's OpenAPI v3 document, or `None` if nothing is served there.
pub fn v3_document(store: &Store, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> =
        store.registry().all().iter().filter(|t| t.group == group && t.version == version).collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in types {
        paths.insert(object_path(rt), json!({"patch": patch_operation(rt)}));
        schemas.insert(schema_name(rt), kind_schema(store, rt));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-sluice-localcp"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The Swagger 2.0 document at `/openapi/v2`: every served kind's schema.
pub fn v2_document(store: &Store) -> Value {
    let definitions: Map<String, Value> =
        store.registry().all().iter().map(|rt| (schema_name(rt), kind_schema(store, rt))).collect();
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0-sluice-localcp"},
           "paths": {}, "definitions": definitions})
}

fn object_path(rt: &ResourceType) -> String {
    let ns = if rt.namespaced { "/namespaces/{namespace}" } else { "" };
    format!("/{}{ns}/{}/{{name}}", gv_path(rt), rt.plural)
}

fn patch_operation(rt: &ResourceType) -> Value {
    let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
    json!({
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk(rt),
        "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
    })
}

fn gvk(rt: &ResourceType) -> Value {
    json!({"group": rt.group, "version": rt.version, "kind": rt.kind})
}

/// Schema names as the API server writes them: the group reversed, then version and kind
/// (`dev.sluice.v1alpha1.SqsSource`, `io.k8s.api.core.v1.Pod` for built-ins).
fn schema_name(rt: &ResourceType) -> String {
    if rt.group.is_empty() || rt.group.ends_with(".k8s.io") || !rt.group.contains('.') {
        let group = rt.group.trim_end_matches(".k8s.io");
        let group = if group.is_empty() { "core" } else { group.split('.').next().unwrap_or(group) };
        return format!("io.k8s.api.{group}.{}.{}", rt.version, rt.kind);
    }
    let reversed: Vec<&str> = rt.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), rt.version, rt.kind)
}

fn kind_schema(store: &Store, rt: &ResourceType) -> Value {
    let from_crd = store.crd_of(rt).and_then(|crd| schema::of_version(crd, &rt.version)).cloned();
    let mut s = from_crd.unwrap_or_else(|| {
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
               "description": format!("{} ({}); field schemas of built-in kinds are not served by the local control plane.",
                                      rt.kind, rt.api_version())})
    });
    s["x-kubernetes-group-version-kind"] = json!([gvk(rt)]);
    s
}

/// Fields of `obj` that its CRD's schema does not declare, as `spec.foo` paths (what `Strict` field
/// validation refuses); empty for built-in kinds.
pub fn unknown_fields(store: &Store, rt: &ResourceType, obj: &Value) -> Vec<String> {
    let Some(s) = store.crd_of(rt).and_then(|crd| schema::of_version(crd, &rt.version)) else {
        return Vec::new();
    };
    let mut pruned = obj.clone();
    schema::default_and_prune(s, &mut pruned);
    let mut out = Vec::new();
    missing(obj, &pruned, "", &mut out);
    out
}

/// Paths present in `before` but not in `after`.
fn missing(before: &Value, after: &Value, prefix: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match a.get(k) {
                    Some(av) => missing(v, av, &path, out),
                    None => out.push(path),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                missing(bv, av, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::registry::Registry;

    #[test]
    fn schema_names_follow_the_api_server() {
        let r = Registry::with_builtins();
        let name = |g: &str, p: &str| {
            schema_name(r.find(g, if g == "autoscaling" { "v2" } else { "v1" }, p).unwrap())
        };
        assert_eq!(name("", "pods"), "io.k8s.api.core.v1.Pod");
        assert_eq!(name("apps", "deployments"), "io.k8s.api.apps.v1.Deployment");
        assert_eq!(name("rbac.authorization.k8s.io", "roles"), "io.k8s.api.rbac.v1.Role");
        let mut rt = r.find("apps", "v1", "deployments").unwrap().clone();
        rt.group = "sluice.dev".into();
        rt.version = "v1alpha1".into();
        rt.kind = "SqsSource".into();
        assert_eq!(schema_name(&rt), "dev.sluice.v1alpha1.SqsSource");
    }

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let mut before = json!({"spec": {"a": 1, "typo": 2, "list": [{"x": 1, "y": 2}]}});
        let after = json!({"spec": {"a": 1, "list": [{"x": 1}]}});
        let mut out = Vec::new();
        missing(&before, &after, "", &mut out);
        out.sort();
        assert_eq!(out, vec!["spec.list[0].y", "spec.typo"]);
        before["spec"] = json!({});
        out.clear();
        missing(&before, &after, "", &mut out);
        assert!(out.is_empty());
    }
}
