//! The pod's ServiceAccount token, as a kubelet mounts it.
//!
//! A kubelet asks the API server for a token bound to the pod (TokenRequest with `boundObjectRef`;
//! the Node authorizer allows it only for pods bound to this node) and writes it into the pod's
//! projected volume, where in-cluster clients find it. A local process has no
//! `/var/run/secrets/kubernetes.io/serviceaccount` of its own and no `KUBERNETES_SERVICE_HOST`, so
//! beside the token the kubelet writes a kubeconfig that names the API server and reads the token
//! from that file (`tokenFile`), and points the process's `KUBECONFIG` at it. The process then talks
//! to the API as `system:serviceaccount:<namespace>:<serviceAccountName>` of its pod, which is what
//! RBAC and the admission policies judge. A pod without the volume (`automountServiceAccountToken:
//! false`) gets no kubeconfig and so no credentials, as in such a pod.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::kubeconfig::{self, Credentials};

/// Who the token is for.
pub struct Binding<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub pod: &'a str,
    pub pod_uid: &'a str,
}

/// Requests a token bound to the pod. Fails while the ServiceAccount does not exist (the pod waits,
/// as a kubelet's does).
pub async fn request(
    client: &kube::Client,
    who: &Binding<'_>,
    audience: Option<&str>,
    expiration_seconds: Option<i64>,
) -> anyhow::Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), who.namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_owned()]).unwrap_or_default(),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(who.pod.to_owned()),
                uid: Some(who.pod_uid.to_owned()),
            }),
            // What the ServiceAccount admission plugin's projected volume asks for.
            expiration_seconds: Some(expiration_seconds.unwrap_or(3607)),
        },
        ..TokenRequest::default()
    };
    let issued = api.create_token_request(who.service_account, &PostParams::default(), &request).await?;
    let token = issued.status.map(|s| s.token).unwrap_or_default();
    anyhow::ensure!(!token.is_empty(), "the TokenRequest for {} returned no token", who.service_account);
    Ok(token)
}

/// Writes `token` as `file` in the volume's directory, and the kubeconfig that reads it; returns
/// the kubeconfig's path.
pub fn write(
    dir: &Path,
    file: &str,
    token: &str,
    api_url: &str,
    ca: &Path,
    namespace: &str,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let token_file = dir.join(file);
    std::fs::write(&token_file, token)?;
    std::fs::write(dir.join("namespace"), namespace)?;
    let path = dir.join("kubeconfig");
    kubeconfig::write(
        &path,
        &kubeconfig::render(api_url, ca, Credentials::TokenFile(&token_file), namespace),
    )?;
    Ok(path)
}
