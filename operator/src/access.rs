//! The Kubernetes API calls this crate makes, as data.
//!
//! Why: RBAC is least privilege only if every rule is used and every call is allowed. Each module
//! that talks to the API server keeps a `const` list of its calls next to the code that makes them;
//! `tests/rbac_trace.rs` compares the union with the ClusterRole in `deploy/`, and the readers'
//! calls with the Role that `build()` renders, and fails on a rule without a call or a call
//! without a rule.

/// One authorized request shape: API group (`""` for core), resource (with `/subresource`), verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiCall {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
}

impl ApiCall {
    pub const fn new(group: &'static str, resource: &'static str, verb: &'static str) -> Self {
        Self { group, resource, verb }
    }
}

/// Server-side apply is authorized as `patch`, and also as `create` when the object does not
/// exist yet, so every applied resource needs both verbs.
pub const fn applies(group: &'static str, resource: &'static str) -> [ApiCall; 2] {
    [ApiCall::new(group, resource, "patch"), ApiCall::new(group, resource, "create")]
}

/// A watched resource (a `Controller` watch or a reflector): list, then watch.
pub const fn watches(group: &'static str, resource: &'static str) -> [ApiCall; 2] {
    [ApiCall::new(group, resource, "list"), ApiCall::new(group, resource, "watch")]
}
