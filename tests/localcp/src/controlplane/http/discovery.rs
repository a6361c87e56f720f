//! Discovery documents (`/version`, `/api`, `/apis`, resource lists).
//!
//! Typed kube-rs clients never ask for these, but kubectl and kube's dynamic discovery do before any
//! request, so they are generated from the registry (CRDs appear as soon as they are created).

use serde_json::{Value, json};

use crate::controlplane::registry::Registry;

/// `/version`.
pub fn version() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-sluice-localcp", "gitCommit": "",
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none",
           "compiler": "rustc", "platform": "linux/amd64"})
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry.groups().iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`, or `None` when the group is not served.
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    registry.groups().iter().find(|(g, _)| g == name).map(|(g, vs)| {
        let mut v = group_json(g, vs);
        v["kind"] = json!("APIGroup");
        v["apiVersion"] = json!("v1");
        v
    })
}

/// `/api/v1` or `/apis/GROUP/VERSION`, or `None` when nothing is served there.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let verbs = json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]);
    let mut out = Vec::new();
    for t in registry.all().iter().filter(|t| t.group == group && t.version == version) {
        out.push(json!({"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                        "kind": t.kind, "verbs": verbs, "shortNames": t.short_names, "categories": ["all"]}));
        if t.has_status {
            out.push(
                json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                            "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    if out.is_empty() {
        return None;
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}))
}
