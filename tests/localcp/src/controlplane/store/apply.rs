//! Server-side apply, reduced to what controllers rely on.
//!
//! An apply creates the object if it is missing, otherwise merges the configuration in (maps merge,
//! lists replace). Each field manager's set of leaf fields is recorded in `metadata.managedFields`
//! (operation `Apply`, with `subresource: status` for status applies). Applying a field that another
//! apply manager owns with a different value is a 409 Conflict unless `force=true`, which transfers it;
//! a field a manager applied before and leaves out now is removed unless another manager owns it.
//! Differences from the real thing: ownership is per map key with lists atomic (no merge keys), `Update`
//! operations (PUT, merge patches) record no ownership and never conflict, and no defaulting happens.
//! A `metadata.resourceVersion` in the configuration must match, as on any update.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::update::Subresource;
use super::{Store, meta_mut};
use crate::controlplane::clock::now_rfc3339;
use crate::controlplane::error::{ApiError, Cause, Result};
use crate::controlplane::fields::{
    FieldPath, Scope, from_fields_v1, get_path, leaf_paths, overlaps, remove_path, scoped_config,
    to_fields_v1,
};
use crate::controlplane::patch::merge_apply;
use crate::controlplane::registry::ResourceType;

/// One `managedFields` entry, decoded.
struct Managed {
    manager: String,
    operation: String,
    subresource: String,
    paths: BTreeSet<FieldPath>,
    raw: Value,
}

impl Store {
    /// Server-side apply of `config` by `manager` (see the module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        config: &Value,
        manager: &str,
        force: bool,
        sub: Subresource,
    ) -> Result<Value> {
        if !config.is_object() {
            return Err(ApiError::bad_request("an apply configuration must be an object"));
        }
        if let Some(kind) = config.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!("apply of kind {kind} to {}", rt.qualified_name())));
        }
        let scope = match sub {
            Subresource::Main => Scope::Main { has_status: rt.has_status },
            Subresource::Status => Scope::Status,
        };
        let scoped = scoped_config(config, scope);
        let paths = leaf_paths(&scoped);
        let subresource = if sub == Subresource::Status { "status" } else { "" };
        let Ok(old) = self.lookup(rt, ns, name).cloned() else {
            if sub == Subresource::Status {
                return Err(ApiError::not_found(&rt.qualified_name(), name));
            }
            let mut obj = config.clone();
            meta_mut(&mut obj).insert("name".into(), json!(name));
            let entry = entry_json(manager, &rt.api_version(), subresource, &paths);
            meta_mut(&mut obj).insert("managedFields".into(), json!([entry]));
            // Like the main endpoint, an apply that creates drops .status of status-subresource types.
            return self.create(rt, ns, obj);
        };
        // A resourceVersion in the configuration is a precondition, as for any update.
        if let Some(rv) = config.pointer("/metadata/resourceVersion").and_then(Value::as_str)
            && !rv.is_empty()
            && old.pointer("/metadata/resourceVersion").and_then(Value::as_str) != Some(rv)
        {
            return Err(ApiError::conflict(&rt.qualified_name(), name));
        }
        let mut managed = decode_managed(&old);
        let conflicts = find_conflicts(&old, &scoped, &paths, &managed, manager, subresource);
        if !conflicts.is_empty() && !force {
            return Err(ApiError::apply_conflict(conflicts));
        }
        let mut new = old.clone();
        let mine_before: BTreeSet<FieldPath> = managed
            .iter()
            .filter(|m| m.manager == manager && m.operation == "Apply" && m.subresource == subresource)
            .flat_map(|m| m.paths.iter().cloned())
            .collect();
        for m in managed.iter_mut().filter(|m| m.manager != manager || m.subresource != subresource) {
            if force {
                m.paths.retain(|p| !paths.iter().any(|q| overlaps(p, q)));
            }
        }
        for dropped in mine_before.difference(&paths) {
            let owned_elsewhere = managed
                .iter()
                .filter(|m| m.manager != manager || m.subresource != subresource)
                .any(|m| m.paths.iter().any(|p| overlaps(p, dropped)));
            if !owned_elsewhere {
                remove_path(&mut new, dropped);
            }
        }
        merge_apply(&mut new, &scoped);
        // Entries keep their order (so a repeated apply is a no-op); this manager's is replaced in place.
        let mine = entry_json(manager, &rt.api_version(), subresource, &paths);
        let mut replaced = false;
        let mut entries: Vec<Value> = Vec::new();
        for m in managed {
            if m.manager == manager && m.subresource == subresource && m.operation == "Apply" {
                if !replaced {
                    entries.push(mine.clone());
                    replaced = true;
                }
            } else if m.operation != "Apply" {
                entries.push(m.raw);
            } else if !m.paths.is_empty() {
                entries.push(with_paths(m.raw, &m.paths));
            }
        }
        if !replaced {
            entries.push(mine);
        }
        meta_mut(&mut new).insert("managedFields".into(), Value::Array(entries));
        self.commit_update(rt, ns, name, old, new, sub)
    }
}

/// Fields in the configuration that another apply manager owns with a different current value.
fn find_conflicts(
    old: &Value,
    scoped: &Value,
    paths: &BTreeSet<FieldPath>,
    managed: &[Managed],
    manager: &str,
    subresource: &str,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    for other in managed.iter().filter(|m| m.operation == "Apply" && m.manager != manager) {
        if other.subresource != subresource {
            continue;
        }
        for p in paths {
            if other.paths.iter().any(|q| overlaps(p, q)) && get_path(old, p) != get_path(scoped, p) {
                causes.push(Cause {
                    field: format!(".{}", p.join(".")),
                    message: format!("conflict with \"{}\"", other.manager),
                });
            }
        }
    }
    causes
}

fn decode_managed(obj: &Value) -> Vec<Managed> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Managed {
            manager: e.get("manager").and_then(Value::as_str).unwrap_or("").to_owned(),
            operation: e.get("operation").and_then(Value::as_str).unwrap_or("").to_owned(),
            subresource: e.get("subresource").and_then(Value::as_str).unwrap_or("").to_owned(),
            paths: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
            raw: e.clone(),
        })
        .collect()
}

fn with_paths(mut raw: Value, paths: &BTreeSet<FieldPath>) -> Value {
    raw["fieldsV1"] = to_fields_v1(paths);
    raw
}

fn entry_json(manager: &str, api_version: &str, subresource: &str, paths: &BTreeSet<FieldPath>) -> Value {
    let mut e = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    });
    if !subresource.is_empty() {
        e["subresource"] = json!(subresource);
    }
    e
}
