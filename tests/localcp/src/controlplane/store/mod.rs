//! The in-memory object store: the control plane's etcd and registry logic, with no HTTP in it.
//!
//! Objects are kept by `(group, plural)` then `(namespace, name)`, one stored version per resource
//! (no conversion: reading through another version only rewrites `apiVersion`). One counter gives every
//! write a global resourceVersion, as etcd's revision does, and every write appends to a bounded
//! [`History`] that watches replay. The semantics a controller depends on (create conflicts, optimistic
//! concurrency, generation, status split, finalizers, garbage collection, server-side apply ownership)
//! are implemented here so they can be unit-tested without a socket.

mod apply;
mod delete;
pub mod history;
mod update;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

pub use delete::Propagation;
pub use history::{Event, EventType, History};
pub use update::Subresource;

use super::admission::{Operation, UserInfo};
use super::clock::{new_uid, now_rfc3339, random_suffix};
use super::error::{ApiError, Cause, Result};
use super::registry::{Registry, ResourceType};
use super::selector::Selectors;
use super::validate::{ValidateFn, Validators};
use super::{events, names, schema};

/// `(group, plural)`: one stored resource, whatever version it is read through.
pub type TypeKey = (String, String);
/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
type ObjKey = (String, String);

/// Default number of events kept for watches.
pub const DEFAULT_HISTORY: usize = 10_000;

/// All objects, the resourceVersion counter and the change history.
#[derive(Debug)]
pub struct Store {
    registry: Registry,
    objects: BTreeMap<TypeKey, BTreeMap<ObjKey, Value>>,
    rv: u64,
    history: History,
    validators: Validators,
    /// Whose request the store is serving, for admission (see [`Store::as_user`]).
    pub(crate) user: UserInfo,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY)
    }
}

impl Store {
    /// A store with the built-in types, the `default` and `kube-system` namespaces, and a history of
    /// `history` events.
    pub fn new(history: usize) -> Self {
        let mut s = Self {
            registry: Registry::with_builtins(),
            objects: BTreeMap::new(),
            rv: 0,
            history: History::new(history),
            validators: Validators::default(),
            user: UserInfo::admin(),
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let rt = s.registry.find("", "v1", "namespaces").cloned();
            if let Some(rt) = rt {
                // Cannot fail: the names are fresh and valid.
                let _ = s.create(&rt, "", json!({"metadata": {"name": ns}}));
            }
        }
        s
    }

    /// The served types (built-ins plus registered CRDs).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The change history, for watches.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Registers a validation hook for a `(group, kind)`.
    pub fn set_validator(&mut self, group: &str, kind: &str, f: ValidateFn) {
        self.validators.insert(group, kind, f);
    }

    /// One object.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value> {
        self.lookup(rt, ns, name).map(|o| present(rt, o))
    }

    /// Objects of a type, in one namespace (`Some`) or all (`None`), that match the selectors; with the
    /// resourceVersion the list is consistent at.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>, selectors: &Selectors) -> (Vec<Value>, u64) {
        let items = self
            .objects
            .get(&type_key(rt))
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|((ons, _), _)| ns.is_none_or(|n| !rt.namespaced || n == ons))
            .filter(|(_, o)| selectors.matches(o))
            .map(|(_, o)| present(rt, o))
            .collect();
        (items, self.rv)
    }

    /// Creates an object (`POST`). The namespace in the URL wins; the name comes from `metadata.name` or
    /// `metadata.generateName`.
    pub fn create(&mut self, rt: &ResourceType, ns: &str, obj: Value) -> Result<Value> {
        let mut obj = if events::is_events_view(rt) { events::to_core(obj) } else { obj };
        if !obj.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        let name = match meta_str(&obj, "name") {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => match meta_str(&obj, "generateName") {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix(5)),
                _ => return Err(invalid(rt, "", "metadata.name", "name or generateName is required")),
            },
        };
        names::check(rt, &name).map_err(|cause| ApiError::invalid(&rt.kind, &name, vec![cause]))?;
        let ns = if rt.namespaced { ns } else { "" };
        if rt.namespaced && ns.is_empty() {
            return Err(ApiError::bad_request("a namespace is required for namespaced resources"));
        }
        if let Some(body_ns) = meta_str(&obj, "namespace")
            && rt.namespaced
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if self.lookup(rt, ns, &name).is_ok() {
            return Err(ApiError::already_exists(&rt.qualified_name(), &name));
        }
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("resourceVersion");
        if rt.has_status
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        self.initial_status(rt, &mut obj)?;
        self.shape(rt, &mut obj);
        self.validate(rt, &obj, &name)?;
        self.admit(Operation::Create, rt, Subresource::Main, ns, &name, Some(&obj), None)?;
        if is_crd(rt) {
            self.registry.register_crd(&obj).map_err(|m| invalid(rt, &name, "spec", &m))?;
        }
        let created = self.put_and_record(rt, ns, &name, obj, EventType::Added);
        self.collect_if_orphan(&created);
        Ok(created)
    }

    /// Fills the status a real server's controllers would set at once (CRDs become Established,
    /// Namespaces Active), so clients that wait for them proceed.
    fn initial_status(&self, rt: &ResourceType, obj: &mut Value) -> Result<()> {
        if is_crd(rt) {
            let names = obj.pointer("/spec/names").cloned().unwrap_or(Value::Null);
            let now = now_rfc3339();
            let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
            obj["status"] = json!({"acceptedNames": names,
                "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
                "storedVersions": stored_versions(obj)});
        } else if rt.group.is_empty() && rt.plural == "namespaces" {
            obj["status"] = json!({"phase": "Active"});
        }
        Ok(())
    }

    /// Defaults and prunes a custom resource by its CRD's structural schema, as the API server does
    /// before validation.
    fn shape(&self, rt: &ResourceType, obj: &mut Value) {
        if let Some(s) = self.crd_of(rt).and_then(|crd| schema::of_version(crd, &rt.version)) {
            schema::default_and_prune(s, obj);
        }
    }

    /// The CustomResourceDefinition that registered `rt`, if it is a custom resource.
    pub fn crd_of(&self, rt: &ResourceType) -> Option<&Value> {
        let crd_key = ("apiextensions.k8s.io".to_owned(), "customresourcedefinitions".to_owned());
        let crd_name = format!("{}.{}", rt.plural, rt.group);
        self.objects.get(&crd_key).and_then(|m| m.get(&(String::new(), crd_name)))
    }

    fn validate(&self, rt: &ResourceType, obj: &Value, name: &str) -> Result<()> {
        self.validators
            .check(&rt.group, &rt.kind, obj)
            .map_err(|causes| ApiError::invalid(&rt.kind, name, causes))
    }

    fn lookup(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<&Value> {
        let ns = if rt.namespaced { ns } else { "" };
        self.objects
            .get(&type_key(rt))
            .and_then(|m| m.get(&(ns.to_owned(), name.to_owned())))
            .ok_or_else(|| ApiError::not_found(&rt.qualified_name(), name))
    }

    /// Stamps a new resourceVersion on `obj`, stores it and records the event.
    fn put_and_record(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        kind: EventType,
    ) -> Value {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = type_key(rt);
        self.objects.entry(key.clone()).or_default().insert((ns.to_owned(), name.to_owned()), obj.clone());
        self.history.push(Event { rv: self.rv, kind, group: key.0, plural: key.1, object: obj.clone() });
        present(rt, &obj)
    }
}

/// Where objects of `rt` are kept (and which watch events concern it): the events.k8s.io view shares
/// the core events.
pub fn type_key(rt: &ResourceType) -> TypeKey {
    if events::is_events_view(rt) {
        return (String::new(), rt.plural.clone());
    }
    (rt.group.clone(), rt.plural.clone())
}

fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

fn stored_versions(crd: &Value) -> Vec<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The object as served through `rt` (its `apiVersion` and `kind`, and the events.k8s.io shape).
pub fn present(rt: &ResourceType, obj: &Value) -> Value {
    let mut out = if events::is_events_view(rt) { events::to_view(obj.clone()) } else { obj.clone() };
    out["apiVersion"] = json!(rt.api_version());
    out["kind"] = json!(rt.kind);
    out
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

/// `metadata` as a mutable map, created if missing.
fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn invalid(rt: &ResourceType, name: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(&rt.kind, name, vec![Cause { field: field.to_owned(), message: message.to_owned() }])
}

#[cfg(test)]
mod tests;
