//! Which resource types the control plane serves, and how each behaves.
//!
//! A real API server learns this from compiled-in types and from CustomResourceDefinitions; here it is a
//! table. The table decides the URL shape (namespaced or not), the `kind` written into objects and lists,
//! and whether a `/status` subresource splits `.status` away from the main endpoint. A CRD registers its
//! kind when it is created, which is why the registry is mutable and lives inside the store.

use serde_json::Value;

/// One served resource (a group, a version and a plural name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// API version inside the group, such as `v1`.
    pub version: String,
    /// Lower-case plural used in URLs, such as `deployments`.
    pub plural: String,
    /// `kind` of one object, such as `Deployment`.
    pub kind: String,
    /// Lower-case singular name, shown in discovery.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether `.status` is a subresource (main endpoint ignores it, `/status` touches only it).
    pub has_status: bool,
    /// kubectl's abbreviations (`deploy`, `cm`, a CRD's `spec.names.shortNames`).
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// `group/version`, or just `version` for the core group: the objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `plural.group` as the API server names a resource in messages (`deployments.apps`).
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        has_status: bool,
    ) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            kind: kind.to_owned(),
            singular: kind.to_lowercase(),
            namespaced,
            has_status,
            short_names: Vec::new(),
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }
}

/// The set of served resource types.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::with_builtins()
    }
}

impl Registry {
    /// The built-in types the Sluice binaries, kubectl and kube-runtime touch.
    pub fn with_builtins() -> Self {
        let b = ResourceType::builtin;
        let types = vec![
            b("", "v1", "namespaces", "Namespace", false, true).short(&["ns"]),
            b("", "v1", "pods", "Pod", true, true).short(&["po"]),
            b("", "v1", "configmaps", "ConfigMap", true, false).short(&["cm"]),
            b("", "v1", "secrets", "Secret", true, false),
            b("", "v1", "services", "Service", true, true).short(&["svc"]),
            b("", "v1", "serviceaccounts", "ServiceAccount", true, false).short(&["sa"]),
            b("", "v1", "events", "Event", true, false).short(&["ev"]),
            b("", "v1", "endpoints", "Endpoints", true, false).short(&["ep"]),
            b("", "v1", "nodes", "Node", false, true).short(&["no"]),
            b("apps", "v1", "deployments", "Deployment", true, true).short(&["deploy"]),
            b("apps", "v1", "replicasets", "ReplicaSet", true, true).short(&["rs"]),
            b("apps", "v1", "statefulsets", "StatefulSet", true, true).short(&["sts"]),
            b("coordination.k8s.io", "v1", "leases", "Lease", true, false),
            b("events.k8s.io", "v1", "events", "Event", true, false).short(&["ev"]),
            b("rbac.authorization.k8s.io", "v1", "roles", "Role", true, false),
            b("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, false),
            b("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, false),
            b("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, false),
            b(
                "admissionregistration.k8s.io",
                "v1",
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
                false,
                true,
            ),
            b(
                "admissionregistration.k8s.io",
                "v1",
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
                false,
                false,
            ),
            b("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, true).short(&["pdb"]),
            b("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, true)
                .short(&["hpa"]),
            b(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                true,
            )
            .short(&["crd", "crds"]),
        ];
        Self { types }
    }

    /// Finds the type served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// Finds a type by its group and kind (any version), for `apiVersion`/`kind` bodies.
    pub fn find_kind(&self, group: &str, kind: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.kind == kind)
    }

    /// Every served type, in registration order.
    pub fn all(&self) -> &[ResourceType] {
        &self.types
    }

    /// Distinct API groups (without the core group), with their versions.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.iter().filter(|t| !t.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => versions.push(t.version.clone()),
                Some(_) => {}
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// Registers (or re-registers) the served versions of a CustomResourceDefinition object.
    /// Returns the registered types, or a message naming the missing field.
    pub fn register_crd(&mut self, crd: &Value) -> Result<Vec<ResourceType>, String> {
        let types = crd_types(crd)?;
        for t in &types {
            self.types.retain(|x| !(x.group == t.group && x.version == t.version && x.plural == t.plural));
            self.types.push(t.clone());
        }
        Ok(types)
    }

    /// Removes the types a CRD registered.
    pub fn unregister_crd(&mut self, crd: &Value) -> Vec<ResourceType> {
        let types = crd_types(crd).unwrap_or_default();
        self.types.retain(|x| !types.iter().any(|t| t.group == x.group && t.plural == x.plural));
        types
    }
}

/// Reads the served versions of a CRD into resource types.
fn crd_types(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let group = spec.get("group").and_then(Value::as_str).ok_or("spec.group is required")?;
    let names = spec.get("names").ok_or("spec.names is required")?;
    let plural = names.get("plural").and_then(Value::as_str).ok_or("spec.names.plural is required")?;
    let kind = names.get("kind").and_then(Value::as_str).ok_or("spec.names.kind is required")?;
    let singular =
        names.get("singular").and_then(Value::as_str).map_or_else(|| kind.to_lowercase(), str::to_owned);
    let short_names: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    let namespaced = spec.get("scope").and_then(Value::as_str).unwrap_or("Namespaced") == "Namespaced";
    let versions = spec.get("versions").and_then(Value::as_array).ok_or("spec.versions is required")?;
    let types: Vec<ResourceType> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            let version = v.get("name").and_then(Value::as_str)?;
            let has_status = v.pointer("/subresources/status").is_some();
            Some(ResourceType {
                group: group.to_owned(),
                version: version.to_owned(),
                plural: plural.to_owned(),
                kind: kind.to_owned(),
                singular: singular.clone(),
                namespaced,
                has_status,
                short_names: short_names.clone(),
            })
        })
        .collect();
    if types.is_empty() {
        return Err("spec.versions must contain a served version".to_owned());
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_registers_served_versions_with_scope_and_status() {
        let mut r = Registry::with_builtins();
        let crd = json!({"spec": {"group": "sluice.dev", "scope": "Namespaced",
            "names": {"plural": "sqssources", "kind": "SqsSource"},
            "versions": [{"name": "v1alpha1", "served": true, "subresources": {"status": {}}},
                         {"name": "v0", "served": false}]}});
        let types = r.register_crd(&crd).unwrap();
        assert_eq!(types.len(), 1);
        let t = r.find("sluice.dev", "v1alpha1", "sqssources").unwrap();
        assert!(t.namespaced && t.has_status);
        assert_eq!(t.api_version(), "sluice.dev/v1alpha1");
        assert!(r.find("sluice.dev", "v0", "sqssources").is_none());
        r.unregister_crd(&crd);
        assert!(r.find("sluice.dev", "v1alpha1", "sqssources").is_none());
    }

    #[test]
    fn crd_without_group_is_rejected() {
        let mut r = Registry::with_builtins();
        assert_eq!(r.register_crd(&json!({"spec": {}})).unwrap_err(), "spec.group is required");
    }
}
