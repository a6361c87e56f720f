//! Writes to existing objects: replace (`PUT`), patches, and the rules every update obeys.
//!
//! Every path funnels into `commit_update`, which is where the API server's update semantics live:
//! immutable metadata is kept, the status subresource and the main endpoint each touch only their half,
//! `generation` counts spec changes, a write that changes nothing is not a write (no new resourceVersion,
//! no watch event, which keeps a controller from waking itself), and the last finalizer leaving a deleted
//! object removes it.

use serde_json::{Value, json};

use super::{EventType, Store, meta_mut, meta_str, present};
use crate::controlplane::admission::Operation;
use crate::controlplane::error::{ApiError, Result};
use crate::controlplane::events;
use crate::controlplane::patch::{PatchKind, apply_patch};
use crate::controlplane::registry::ResourceType;

/// Which endpoint a write came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `/…/name`: everything but `.status` (when the type has a status subresource).
    Main,
    /// `/…/name/status`: only `.status`.
    Status,
}

/// Metadata the client may change; everything else in metadata is the server's.
const CLIENT_METADATA: &[&str] = &["labels", "annotations", "ownerReferences", "finalizers", "managedFields"];

impl Store {
    /// Replaces an object (`PUT`). A non-empty `metadata.resourceVersion` must match the stored one.
    pub fn replace(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        new: Value,
        sub: Subresource,
    ) -> Result<Value> {
        let new = if events::is_events_view(rt) { events::to_core(new) } else { new };
        let old = self.lookup(rt, ns, name)?.clone();
        if let Some(body_name) = meta_str(&new, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the URL ({name})"
            )));
        }
        check_rv(rt, name, &old, &new)?;
        self.commit_update(rt, ns, name, old, new, sub)
    }

    /// Patches an object with a merge, strategic-merge, JSON or apply patch.
    pub fn patch(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        kind: &PatchKind,
        body: &Value,
        sub: Subresource,
    ) -> Result<Value> {
        if let PatchKind::Apply { manager, force } = kind {
            return self.apply(rt, ns, name, body, manager, *force, sub);
        }
        let old = self.lookup(rt, ns, name)?.clone();
        // A patch through the events.k8s.io view is written against that view's shape.
        let view = events::is_events_view(rt);
        let mut new = if view { events::to_view(old.clone()) } else { old.clone() };
        apply_patch(kind, &mut new, body)?;
        let new = if view { events::to_core(new) } else { new };
        check_rv(rt, name, &old, &new)?;
        self.commit_update(rt, ns, name, old, new, sub)
    }

    /// Stores `new` as the next state of `old`, enforcing the update rules in the module doc.
    pub(super) fn commit_update(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        old: Value,
        new: Value,
        sub: Subresource,
    ) -> Result<Value> {
        let mut merged = match sub {
            Subresource::Status => {
                let mut m = old.clone();
                set_or_remove(&mut m, "status", new.get("status"));
                let managed = new.pointer("/metadata/managedFields").cloned();
                set_or_remove(&mut m["metadata"], "managedFields", managed.as_ref());
                m
            }
            Subresource::Main => {
                let mut m = old.clone();
                for (k, v) in new.as_object().into_iter().flatten() {
                    if k != "metadata" && k != "status" {
                        m[k] = v.clone();
                    }
                }
                if let Some(obj) = m.as_object_mut() {
                    obj.retain(|k, _| k == "metadata" || k == "status" || new.get(k).is_some());
                }
                if !rt.has_status {
                    set_or_remove(&mut m, "status", new.get("status"));
                }
                for field in CLIENT_METADATA {
                    let v = new.get("metadata").and_then(|md| md.get(*field));
                    // An update that omits managedFields keeps them, as the API server does.
                    if *field != "managedFields" || v.is_some() {
                        set_or_remove(&mut m["metadata"], field, v);
                    }
                }
                m
            }
        };
        merged["apiVersion"] = old["apiVersion"].clone();
        merged["kind"] = old["kind"].clone();
        self.shape(rt, &mut merged);
        if content(rt, &old) != content(rt, &merged) {
            let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            meta_mut(&mut merged).insert("generation".into(), json!(generation + 1));
        }
        // Admitted even when it changes nothing, as by the API server (admission precedes storage).
        self.admit(Operation::Update, rt, sub, ns, name, Some(&merged), Some(&old))?;
        if comparable(&old) == comparable(&merged) {
            return Ok(present(rt, &old));
        }
        self.validate(rt, &merged, name)?;
        let deleting = merged.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_left =
            merged.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if deleting && !finalizers_left {
            let gone = self.remove_object(rt, ns, name, merged);
            self.collect_garbage();
            return Ok(gone);
        }
        let owners_changed =
            old.pointer("/metadata/ownerReferences") != merged.pointer("/metadata/ownerReferences");
        let stored = self.put_and_record(rt, ns, name, merged, EventType::Modified);
        if owners_changed {
            self.collect_if_orphan(&stored);
        }
        Ok(stored)
    }
}

/// Optimistic concurrency: a resourceVersion in the body must equal the stored one.
fn check_rv(rt: &ResourceType, name: &str, old: &Value, new: &Value) -> Result<()> {
    match meta_str(new, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
            Err(ApiError::conflict(&rt.qualified_name(), name))
        }
        _ => Ok(()),
    }
}

fn set_or_remove(target: &mut Value, key: &str, value: Option<&Value>) {
    match (value, target.as_object_mut()) {
        (Some(v), Some(m)) if !v.is_null() => {
            m.insert(key.to_owned(), v.clone());
        }
        (_, Some(m)) => {
            m.remove(key);
        }
        (_, None) => {}
    }
}

/// What `generation` tracks: everything but metadata (and status, when it is a subresource).
fn content(rt: &ResourceType, obj: &Value) -> Value {
    let mut c = obj.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if rt.has_status {
            m.remove("status");
        }
    }
    c
}

/// The object without the fields that change on every write (resourceVersion, managedFields times).
fn comparable(obj: &Value) -> Value {
    let mut c = obj.clone();
    if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
            for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                e.remove("time");
            }
        }
    }
    c
}
