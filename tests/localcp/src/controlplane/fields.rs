//! Field sets for server-side apply: which leaf fields an apply configuration sets, and the `fieldsV1`
//! encoding stored in `metadata.managedFields`.
//!
//! Real SSA tracks ownership down to list elements keyed by merge keys. Here maps are descended and every
//! list or scalar is one leaf (lists are owned atomically). That is enough for the ownership split Sluice
//! relies on (the operator owns the Deployment, the scaler owns only `spec.replicas`) and for removing a
//! field a manager stops applying.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A path of map keys from the object root to a leaf.
pub type FieldPath = Vec<String>;

/// Metadata fields that apply may own; the rest of metadata belongs to the server.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "ownerReferences", "finalizers"];

/// Which part of an object an apply targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main endpoint: everything but `.status` when the type has a status subresource.
    Main {
        /// Whether `.status` is a subresource (and therefore excluded here).
        has_status: bool,
    },
    /// The `/status` subresource: only `.status`.
    Status,
}

/// Reduces an apply configuration to the fields the scope lets it set.
pub fn scoped_config(config: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    let Some(obj) = config.as_object() else { return Value::Object(out) };
    for (k, v) in obj {
        let keep = match (scope, k.as_str()) {
            (_, "apiVersion" | "kind") => false,
            (Scope::Status, key) => key == "status",
            (Scope::Main { has_status }, "status") => !has_status,
            (Scope::Main { .. }, "metadata") => {
                let meta: Map<String, Value> = v
                    .as_object()
                    .map(|m| m.iter().filter(|(mk, _)| OWNED_METADATA.contains(&mk.as_str())))
                    .into_iter()
                    .flatten()
                    .map(|(mk, mv)| (mk.clone(), mv.clone()))
                    .collect();
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
                false
            }
            _ => true,
        };
        if keep {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// Leaf paths set by a (scoped) configuration; an empty map is a leaf too.
pub fn leaf_paths(config: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    collect(config, &mut Vec::new(), &mut out);
    out
}

fn collect(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                collect(child, prefix, out);
                prefix.pop();
            }
        }
        _ if !prefix.is_empty() => {
            out.insert(prefix.clone());
        }
        _ => {}
    }
}

/// Encodes paths as `fieldsV1` (`{"f:spec":{"f:replicas":{}}}`).
pub fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut cur = &mut root;
        for seg in path {
            let entry = cur.entry(format!("f:{seg}")).or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else { break };
            cur = next;
        }
    }
    Value::Object(root)
}

/// Decodes `fieldsV1` back into leaf paths (keys other than `f:` ones are ignored).
pub fn from_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    decode(v, &mut Vec::new(), &mut out);
    out
}

fn decode(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let children: Vec<(&String, &Value)> =
        v.as_object().map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect()).unwrap_or_default();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, child) in children {
        prefix.push(k[2..].to_owned());
        decode(child, prefix, out);
        prefix.pop();
    }
}

/// The value at a path, if every map on the way exists.
pub fn get_path<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |cur, seg| cur.get(seg))
}

/// Removes the leaf at a path, then any map on the way that became empty.
pub fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    if parents.is_empty() {
        if let Some(m) = obj.as_object_mut() {
            m.remove(last);
        }
        return;
    }
    if let Some(parent) = obj.get_mut(&parents[0]) {
        remove_path(parent, &path[1..]);
        if parent.as_object().is_some_and(Map::is_empty)
            && let Some(m) = obj.as_object_mut()
        {
            m.remove(&parents[0]);
        }
    }
}

/// Whether two paths overlap (equal, or one is a prefix of the other).
pub fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> FieldPath {
        s.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn scoped_config_drops_server_fields_and_status() {
        let c = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"k": "v"}},
                       "spec": {"replicas": 2}, "status": {"ready": 1}});
        let main = scoped_config(&c, Scope::Main { has_status: true });
        assert_eq!(main, json!({"metadata": {"labels": {"k": "v"}}, "spec": {"replicas": 2}}));
        assert_eq!(scoped_config(&c, Scope::Status), json!({"status": {"ready": 1}}));
    }

    #[test]
    fn paths_round_trip_through_fields_v1() {
        let c = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "a"}]}}},
                       "data": {}});
        let paths = leaf_paths(&c);
        assert!(paths.contains(&p("spec.replicas")));
        assert!(paths.contains(&p("spec.template.spec.containers")));
        assert!(paths.contains(&p("data")));
        let encoded = to_fields_v1(&paths);
        assert_eq!(encoded["f:spec"]["f:replicas"], json!({}));
        assert_eq!(from_fields_v1(&encoded), paths);
    }

    #[test]
    fn remove_prunes_empty_parents() {
        let mut o = json!({"data": {"a": "1"}, "spec": {"x": {"y": 1}, "z": 2}});
        remove_path(&mut o, &p("data.a"));
        remove_path(&mut o, &p("spec.x.y"));
        assert_eq!(o, json!({"spec": {"z": 2}}));
        assert!(overlaps(&p("spec"), &p("spec.z")));
        assert!(!overlaps(&p("spec.a"), &p("spec.z")));
    }
}
