//! Deletion, finalizers and ownerReference garbage collection.
//!
//! Kubernetes deletes in two steps when finalizers are present (set `deletionTimestamp`, wait for the
//! finalizers to be removed) and lets a separate garbage collector delete dependents whose owners are
//! all gone. Here the collector runs synchronously after every removal, so a test sees children vanish
//! as soon as the owner does. The real collector also deletes an object that is written with owner
//! references none of which exists (a controller applying children of a source that was deleted a
//! moment before, from a stale cache): that happens here right after such a create or update, so the
//! orphan is seen as ADDED then DELETED, as a watcher of a real cluster would see it. Propagation is approximated: `Foreground` deletes dependents before the
//! owner (without the `foregroundDeletion` finalizer dance), `Background` deletes them right after,
//! `Orphan` strips the owner's reference from them.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{EventType, ObjKey, Store, Subresource, TypeKey, is_crd, meta_mut, meta_str, present};
use crate::controlplane::admission::{Operation, UserInfo};
use crate::controlplane::clock::now_rfc3339;
use crate::controlplane::error::{ApiError, Result};
use crate::controlplane::registry::ResourceType;

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete dependents after the owner (the default).
    #[default]
    Background,
    /// Delete dependents first.
    Foreground,
    /// Keep dependents, removing their reference to the owner.
    Orphan,
}

impl Propagation {
    /// Parses the API's spelling; unknown values are a bad request.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "Background" => Ok(Self::Background),
            "Foreground" => Ok(Self::Foreground),
            "Orphan" => Ok(Self::Orphan),
            other => Err(ApiError::bad_request(format!("unknown propagationPolicy {other}"))),
        }
    }
}

impl Store {
    /// Deletes an object. With finalizers it is only marked (`deletionTimestamp`) and returned; otherwise
    /// it is removed, dependents are collected, and its last state is returned. `precondition_rv`, when
    /// given, must match.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        propagation: Propagation,
        precondition_rv: Option<&str>,
    ) -> Result<Value> {
        let obj = self.lookup(rt, ns, name)?.clone();
        if let Some(rv) = precondition_rv
            && Some(rv) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict(&rt.qualified_name(), name));
        }
        self.admit(Operation::Delete, rt, Subresource::Main, ns, name, None, Some(&obj))?;
        let uid = meta_str(&obj, "uid").unwrap_or("").to_owned();
        let ns = if rt.namespaced { ns } else { "" };
        match propagation {
            Propagation::Orphan => self.orphan_dependents(&uid),
            Propagation::Foreground => self.delete_dependents(&uid),
            Propagation::Background => {}
        }
        let has_finalizers =
            obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(present(rt, &obj));
            }
            let mut marked = obj;
            meta_mut(&mut marked).insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta_mut(&mut marked).insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.put_and_record(rt, ns, name, marked, EventType::Modified));
        }
        let gone = self.remove_object(rt, ns, name, obj);
        self.collect_garbage();
        Ok(gone)
    }

    /// Removes an object for good and records DELETED; a CRD also takes its kind and objects with it.
    pub(super) fn remove_object(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut last: Value,
    ) -> Value {
        let key = (rt.group.clone(), rt.plural.clone());
        if let Some(m) = self.objects.get_mut(&key) {
            m.remove(&(ns.to_owned(), name.to_owned()));
        }
        self.rv += 1;
        meta_mut(&mut last).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.history.push(super::Event {
            rv: self.rv,
            kind: EventType::Deleted,
            group: key.0,
            plural: key.1,
            object: last.clone(),
        });
        if is_crd(rt) {
            for t in self.registry.unregister_crd(&last) {
                let tk = (t.group.clone(), t.plural.clone());
                let instances: Vec<(ObjKey, Value)> = self
                    .objects
                    .get(&tk)
                    .into_iter()
                    .flatten()
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect();
                for ((ons, oname), obj) in instances {
                    self.remove_object(&t, &ons, &oname, obj);
                }
            }
        }
        present(rt, &last)
    }

    /// Collects `obj` (just written) and its dependents if it names owners and none of them exists.
    pub(super) fn collect_if_orphan(&mut self, obj: &Value) {
        let owners = owner_uids(obj);
        if owners.is_empty() {
            return;
        }
        let present = |uid: &str| self.all().any(|(_, _, o)| meta_str(o, "uid") == Some(uid));
        if !owners.iter().any(|u| present(u)) {
            self.collect_garbage();
        }
    }

    /// Deletes every object whose owners are all gone, until none is left (each pass removes or marks
    /// at least one object not marked before, so the loop ends).
    pub fn collect_garbage(&mut self) {
        loop {
            let uids: BTreeSet<String> =
                self.all().filter_map(|(_, _, o)| meta_str(o, "uid").map(str::to_owned)).collect();
            let orphans: Vec<(TypeKey, ObjKey)> = self
                .all()
                .filter(|(_, _, o)| o.pointer("/metadata/deletionTimestamp").is_none())
                .filter(|(_, _, o)| {
                    let owners: Vec<&str> = owner_uids(o);
                    !owners.is_empty() && owners.iter().all(|u| !uids.contains(*u))
                })
                .map(|(t, k, _)| (t.clone(), k.clone()))
                .collect();
            if orphans.is_empty() {
                return;
            }
            let mut collected = 0;
            for (tk, (ns, name)) in orphans {
                if let Some(rt) = self.type_of(&tk) {
                    // As the collector, not as the caller whose write orphaned the object.
                    let gc = UserInfo::garbage_collector();
                    if self.as_user(gc, |s| s.delete(&rt, &ns, &name, Propagation::Background, None)).is_ok()
                    {
                        collected += 1;
                    }
                }
            }
            // A pass that removed nothing would repeat forever (under the store lock): stop.
            if collected == 0 {
                return;
            }
        }
    }

    fn delete_dependents(&mut self, uid: &str) {
        let deps = self.dependents(uid);
        for (tk, (ns, name)) in deps {
            if let Some(rt) = self.type_of(&tk) {
                let gc = UserInfo::garbage_collector();
                let _ = self.as_user(gc, |s| s.delete(&rt, &ns, &name, Propagation::Foreground, None));
            }
        }
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for (tk, (ns, name)) in self.dependents(uid) {
            let Some(rt) = self.type_of(&tk) else { continue };
            let Ok(old) = self.lookup(&rt, &ns, &name).cloned() else { continue };
            let mut new = old.clone();
            if let Some(Value::Array(refs)) = new.pointer_mut("/metadata/ownerReferences") {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            }
            let gc = UserInfo::garbage_collector();
            let _ =
                self.as_user(gc, |s| s.commit_update(&rt, &ns, &name, old, new, super::Subresource::Main));
        }
    }

    fn dependents(&self, uid: &str) -> Vec<(TypeKey, ObjKey)> {
        self.all()
            .filter(|(_, _, o)| owner_uids(o).contains(&uid))
            .map(|(t, k, _)| (t.clone(), k.clone()))
            .collect()
    }

    fn all(&self) -> impl Iterator<Item = (&TypeKey, &ObjKey, &Value)> {
        self.objects.iter().flat_map(|(t, m)| m.iter().map(move |(k, o)| (t, k, o)))
    }

    fn type_of(&self, key: &TypeKey) -> Option<ResourceType> {
        self.registry.all().iter().find(|t| t.group == key.0 && t.plural == key.1).cloned()
    }
}

fn owner_uids(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
        .collect()
}
