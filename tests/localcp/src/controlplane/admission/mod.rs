//! Validating admission: the ValidatingAdmissionPolicies stored in the control plane, evaluated
//! against every create, update and delete, with the identity of the caller.
//!
//! Why: Sluice ships a policy (deploy/policy/) that lets a reader write only its own lease; the
//! end-to-end suites must run with it in force, so the same YAML is stored here as any cluster
//! stores it, and every write the store makes on behalf of a client is admitted first. The store
//! calls [`Store::admit`] after computing the object it would write (after patches and server-side
//! apply, as the API server admits the result, not the request body) and before storing it.
//!
//! Reproduced: `matchConstraints.resourceRules` and `excludeResourceRules` (groups, versions,
//! resources with `*` and subresource patterns, operations, resource names), `matchConditions`,
//! `variables`, `validations` with `message`, `messageExpression` and `reason`, `failurePolicy`,
//! the binding's `validationActions` (`Deny` refuses; `Warn` and `Audit` only log) and its
//! `matchResources.resourceRules`; the denial is the API server's: the first failed validation, as
//! `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with binding
//! '<binding>' denied request: <message>`, with the code of the reason (422 by default).
//!
//! Parameters: a policy's `paramKind` and a binding's `paramRef` by `name` (in `paramRef.namespace`,
//! or else the request's namespace), with `parameterNotFoundAction`; the object is `params` in CEL.
//!
//! Not reproduced: parameters selected by label (`paramRef.selector`: such a binding fails per
//! `failurePolicy`), `namespaceObject`, `authorizer`, namespace and object selectors (a binding applies to every
//! namespace), `auditAnnotations`, policy status and type checking, CEL cost limits, mutating
//! policies and webhooks. Writes the control plane makes itself (garbage collection) are not
//! admitted, as in a cluster.

mod cel;
mod evaluate;
pub mod policy;

use std::collections::BTreeMap;

use serde_json::{Value, json};

pub use evaluate::{ParamLookup, evaluate};

use super::error::Result;
use super::registry::ResourceType;
use super::selector::Selectors;
use super::store::{Store, Subresource};

/// Who makes a request, as authentication found it (`request.userInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Such as `authentication.kubernetes.io/pod-name` for a token bound to a pod.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The garbage collector's identity: its deletes of dependents are the control plane's own, made
    /// whoever's write orphaned them (a policy that denies a reader deletes must not stop them).
    pub fn garbage_collector() -> Self {
        Self {
            username: "system:serviceaccount:kube-system:generic-garbage-collector".to_owned(),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                "system:serviceaccounts:kube-system".to_owned(),
                "system:authenticated".to_owned(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// The identity of a request without a token: the cluster administrator, as the kubeconfig that
    /// the control plane writes (no user) has always been treated.
    pub fn admin() -> Self {
        Self {
            username: "system:admin".to_owned(),
            uid: String::new(),
            groups: vec!["system:masters".to_owned(), "system:authenticated".to_owned()],
            extra: BTreeMap::new(),
        }
    }

    /// Whether this is the administrator (who may, for one, request tokens).
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }

    fn to_json(&self) -> Value {
        json!({"username": self.username, "uid": self.uid, "groups": self.groups, "extra": self.extra})
    }
}

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }
}

/// One write to admit.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub resource: &'a ResourceType,
    /// Empty, or `status` for the status subresource.
    pub subresource: &'a str,
    pub operation: Operation,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object as it would be stored (`None` for a delete).
    pub object: Option<&'a Value>,
    /// The stored object before the write (`None` for a create).
    pub old_object: Option<&'a Value>,
    pub user: &'a UserInfo,
}

impl Request<'_> {
    /// The `request` variable of the CEL expressions.
    fn variable(self) -> Value {
        let rt = self.resource;
        json!({
            "operation": self.operation.as_str(),
            "name": self.name,
            "namespace": self.namespace,
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "subResource": self.subresource,
            "dryRun": false,
            "userInfo": self.user.to_json(),
        })
    }

    /// `plural` or `plural/subresource`, as resource rules name it.
    fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.plural.clone()
        } else {
            format!("{}/{}", self.resource.plural, self.subresource)
        }
    }
}

const GROUP: &str = "admissionregistration.k8s.io";

impl Store {
    /// Runs `f` with `user` as the caller whose writes are admitted.
    pub fn as_user<T>(&mut self, user: UserInfo, f: impl FnOnce(&mut Self) -> T) -> T {
        let previous = std::mem::replace(&mut self.user, user);
        let out = f(self);
        self.user = previous;
        out
    }

    /// Admits a write of the current caller against the stored policies and bindings.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        &self,
        operation: Operation,
        rt: &ResourceType,
        sub: Subresource,
        namespace: &str,
        name: &str,
        object: Option<&Value>,
        old_object: Option<&Value>,
    ) -> Result<()> {
        let stored = |plural: &str| -> Vec<Value> {
            match self.registry().find(GROUP, "v1", plural) {
                Some(t) => self.list(t, None, &Selectors::default()).0,
                None => Vec::new(),
            }
        };
        let bindings = stored("validatingadmissionpolicybindings");
        if bindings.is_empty() {
            return Ok(());
        }
        let policies = stored("validatingadmissionpolicies");
        let request = Request {
            resource: rt,
            subresource: if sub == Subresource::Status { "status" } else { "" },
            operation,
            namespace,
            name,
            object,
            old_object,
            user: &self.user,
        };
        let params = |kind: &policy::ParamKind, namespace: &str, name: &str| {
            let rt = self.registry().find_kind(kind.group(), &kind.kind)?;
            self.get(rt, namespace, name).ok()
        };
        evaluate(&policies, &bindings, &request, &params)
    }
}
