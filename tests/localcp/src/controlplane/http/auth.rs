//! Who is asking: bearer tokens to users, and the TokenRequest API that hands tokens out.
//!
//! Why: the reader policy (deploy/policy/) decides by the caller's ServiceAccount and the pod its
//! token is bound to, so the control plane must know both. A kubelet obtains a pod's token with a
//! TokenRequest (`POST …/serviceaccounts/<name>/token` with `boundObjectRef` naming the pod) and
//! mounts it; the API server then authenticates the token as
//! `system:serviceaccount:<namespace>:<name>` with the pod in `userInfo.extra`. The same happens
//! here with opaque random tokens kept in memory.
//!
//! A request without a token is the administrator (what the kubeconfig the control plane writes
//! has always meant), so clients that predate tokens keep working; an unknown token is refused with
//! 401. Not reproduced: JWTs and their audiences, expiry and rotation (a token lives as long as the
//! control plane), invalidation when the bound pod is deleted, and RBAC (a ServiceAccount may read
//! everything; only admission limits its writes). Only the administrator may request tokens.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::controlplane::admission::UserInfo;
use crate::controlplane::clock::{now_rfc3339, random_suffix};
use crate::controlplane::error::{ApiError, Result};
use crate::controlplane::store::{Store, meta_str};

/// `userInfo.extra` keys the API server sets for a token bound to a pod.
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";

/// Issued tokens and whom they stand for.
#[derive(Debug, Default)]
pub struct Tokens(Mutex<HashMap<String, UserInfo>>);

impl Tokens {
    /// The caller of a request: the administrator without an `Authorization` header, the token's
    /// user with a known bearer token, 401 otherwise.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<UserInfo> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(UserInfo::admin()) };
        let token = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
        let known = token.and_then(|t| self.lock().get(t).cloned());
        known.ok_or_else(|| ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized: the bearer token is not one this control plane issued".to_owned(),
            causes: Vec::new(),
            subject: None,
        })
    }

    /// Serves a TokenRequest for ServiceAccount `namespace/name` (which must exist, but for
    /// `default`), answering the
    /// TokenRequest with `status.token`. A `spec.boundObjectRef` of kind Pod puts the pod's name
    /// and uid into the user's `extra`, as the API server does.
    pub fn issue(
        &self,
        store: &Store,
        caller: &UserInfo,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Value> {
        if !caller.is_admin() {
            return Err(ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "serviceaccounts \"{name}\" is forbidden: User \"{}\" cannot create resource \
                     \"serviceaccounts/token\" in namespace \"{namespace}\": only the administrator \
                     (the kubelet) requests tokens from the local control plane",
                    caller.username
                ),
                causes: Vec::new(),
                subject: None,
            });
        }
        let rt = store
            .registry()
            .find("", "v1", "serviceaccounts")
            .cloned()
            .ok_or_else(|| ApiError::not_found("serviceaccounts", name))?;
        // Every namespace has a `default` ServiceAccount (a cluster's ServiceAccount controller
        // creates it); this control plane has no controllers, so it is taken as given.
        let uid = match store.get(&rt, namespace, name) {
            Ok(account) => meta_str(&account, "uid").unwrap_or_default().to_owned(),
            Err(_) if name == "default" => String::new(),
            Err(e) => return Err(e),
        };
        let mut extra = BTreeMap::new();
        if let Some(bound) = body.pointer("/spec/boundObjectRef")
            && bound.get("kind").and_then(Value::as_str) == Some("Pod")
        {
            let field = |f: &str| bound.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
            extra.insert(POD_NAME_KEY.to_owned(), vec![field("name")]);
            extra.insert(POD_UID_KEY.to_owned(), vec![field("uid")]);
        }
        let user = UserInfo {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid,
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
            extra,
        };
        let token = format!("sluice-local-{}", random_suffix(40));
        self.lock().insert(token.clone(), user);
        let mut answer = body.clone();
        answer["apiVersion"] = json!("authentication.k8s.io/v1");
        answer["kind"] = json!("TokenRequest");
        answer["metadata"] =
            json!({"name": name, "namespace": namespace, "creationTimestamp": now_rfc3339()});
        // No expiry is enforced; a far date keeps clients from refreshing.
        answer["status"] = json!({"token": token, "expirationTimestamp": "2999-12-31T00:00:00Z"});
        Ok(answer)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, UserInfo>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
