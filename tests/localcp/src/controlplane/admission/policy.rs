//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding objects, read for evaluation.
//!
//! Only the fields the evaluation uses are read; anything else in the objects is kept by the store
//! but has no effect here (see the parent module for what is not reproduced).

use serde::Deserialize;
use serde_json::Value;

/// `spec` of a ValidatingAdmissionPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicySpec {
    /// `Fail` (the default) or `Ignore`: what an expression that cannot be evaluated means.
    pub failure_policy: Option<String>,
    pub match_constraints: MatchResources,
    pub match_conditions: Vec<Named>,
    pub variables: Vec<Named>,
    pub validations: Vec<Validation>,
    /// The kind of the parameter resource its bindings name with `paramRef`.
    pub param_kind: Option<ParamKind>,
}

/// `paramKind` of a policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

impl ParamKind {
    /// The API group (`""` for the core group of `v1`).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(group, _)| group)
    }
}

/// `paramRef` of a binding: which parameter object its policy is evaluated with.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParamRef {
    pub name: Option<String>,
    /// Unset: the namespace of the request (for a namespaced parameter kind).
    pub namespace: Option<String>,
    /// Not reproduced: a binding that selects parameters by label fails per `failurePolicy`.
    pub selector: Option<Value>,
    /// `Allow`: no parameter object means the binding allows the request; `Deny` (the default) refuses.
    pub parameter_not_found_action: Option<String>,
}

/// `matchConstraints` (of a policy) or `matchResources` (of a binding).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MatchResources {
    pub resource_rules: Vec<ResourceRule>,
    pub exclude_resource_rules: Vec<ResourceRule>,
}

/// One `resourceRules` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceRule {
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub operations: Vec<String>,
    pub resource_names: Vec<String>,
}

/// A named expression: a match condition or a variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Named {
    pub name: String,
    pub expression: String,
}

/// One validation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Validation {
    pub expression: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    /// `Unauthorized`, `Forbidden`, `Invalid` (the default) or `RequestEntityTooLarge`.
    pub reason: Option<String>,
}

/// `spec` of a ValidatingAdmissionPolicyBinding.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BindingSpec {
    pub policy_name: String,
    /// `Deny`, `Warn`, `Audit`: only `Deny` refuses the request; the others are logged.
    pub validation_actions: Vec<String>,
    pub match_resources: Option<MatchResources>,
    pub param_ref: Option<ParamRef>,
}

/// A policy or binding with its name.
#[derive(Debug, Clone)]
pub struct Object<S> {
    pub name: String,
    pub spec: S,
}

/// Reads `metadata.name` and `spec` of a stored object.
pub fn read<S: for<'de> Deserialize<'de> + Default>(obj: &Value) -> Result<Object<S>, String> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let spec = match obj.get("spec") {
        Some(spec) => S::deserialize(spec).map_err(|e| format!("{name}: spec: {e}"))?,
        None => S::default(),
    };
    Ok(Object { name, spec })
}

/// What a rule is matched against.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub version: &'a str,
    /// `plural` or `plural/subresource`.
    pub resource: &'a str,
    pub operation: &'a str,
    pub name: &'a str,
}

impl MatchResources {
    /// Whether a request falls under these rules (an empty rule list matches everything, as for a
    /// binding without `matchResources`).
    pub fn matches(&self, t: &Target<'_>) -> bool {
        let included = self.resource_rules.is_empty() || self.resource_rules.iter().any(|r| r.matches(t));
        included && !self.exclude_resource_rules.iter().any(|r| r.matches(t))
    }
}

impl ResourceRule {
    fn matches(&self, t: &Target<'_>) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        any(&self.api_groups, t.group)
            && any(&self.api_versions, t.version)
            && any(&self.operations, t.operation)
            && self.resources.iter().any(|r| resource_matches(r, t.resource))
            && (self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == t.name))
    }
}

/// Kubernetes' resource patterns: `*` is every resource but no subresource, `*/*` everything,
/// `pods/*` every subresource of pods, `*/status` the status of everything.
fn resource_matches(pattern: &str, resource: &str) -> bool {
    let (res, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let (p_res, p_sub) = pattern.split_once('/').unwrap_or((pattern, ""));
    (p_res == "*" || p_res == res) && (p_sub == sub || (p_sub == "*" && !sub.is_empty()) || pattern == "*/*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_patterns_follow_kubernetes() {
        assert!(resource_matches("configmaps", "configmaps"));
        assert!(resource_matches("*", "configmaps"));
        assert!(!resource_matches("*", "deployments/status"));
        assert!(resource_matches("*/*", "deployments/status"));
        assert!(resource_matches("*/*", "configmaps"));
        assert!(resource_matches("deployments/*", "deployments/status"));
        assert!(!resource_matches("deployments/*", "deployments"));
        assert!(resource_matches("*/status", "pods/status"));
        assert!(!resource_matches("configmaps", "secrets"));
    }
}
