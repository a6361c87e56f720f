//! The pod's ServiceAccount token, as a kubelet mounts it.
//!
//! A kubelet asks the API server for a token bound to the pod (TokenRequest with `boundObjectRef`)
//! and mounts it at `/var/run/secrets/kubernetes.io/serviceaccount/token`, where in-cluster clients
//! find it. A local process cannot have that path to itself, so the runner writes the token to
//! `<pod dir>/serviceaccount/token` and points the process's `KUBECONFIG` at a kubeconfig beside it
//! that names the API server and reads the token from that file (`tokenFile`). The process then
//! talks to the control plane as `system:serviceaccount:<namespace>:<serviceAccountName>` of its
//! pod, which is what the admission policies see, instead of as the administrator.
//!
//! A pod with `automountServiceAccountToken: false` gets no token: its `KUBECONFIG` names a file
//! that does not exist, so a Kubernetes client in it finds no credentials, as in such a pod.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

/// The directory that stands for `/var/run/secrets/kubernetes.io/serviceaccount`.
pub fn mount_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("serviceaccount")
}

/// The kubeconfig a pod's process gets in `KUBECONFIG` (absent when no token is mounted).
pub fn kubeconfig_path(pod_dir: &Path) -> PathBuf {
    mount_dir(pod_dir).join("kubeconfig")
}

/// Who the token is for.
pub struct Binding<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub pod: &'a str,
    pub pod_uid: &'a str,
}

/// Requests a token for the pod and writes `token`, `namespace` and `kubeconfig` into its mount
/// directory. Fails while the ServiceAccount does not exist (the pod waits, as a kubelet's does).
pub async fn mount(
    client: &kube::Client,
    api_url: &str,
    who: &Binding<'_>,
    pod_dir: &Path,
) -> anyhow::Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), who.namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(who.pod.to_owned()),
                uid: Some(who.pod_uid.to_owned()),
            }),
            // What a kubelet asks for (the API server may extend it).
            expiration_seconds: Some(3607),
        },
        ..TokenRequest::default()
    };
    let issued = api.create_token_request(who.service_account, &PostParams::default(), &request).await?;
    let token = issued.status.map(|s| s.token).unwrap_or_default();
    anyhow::ensure!(!token.is_empty(), "the TokenRequest for {} returned no token", who.service_account);
    let dir = mount_dir(pod_dir);
    std::fs::create_dir_all(&dir)?;
    let token_file = dir.join("token");
    std::fs::write(&token_file, token)?;
    std::fs::write(dir.join("namespace"), who.namespace)?;
    std::fs::write(kubeconfig_path(pod_dir), render(api_url, who.namespace, &token_file))?;
    Ok(())
}

/// A kubeconfig for `url` that authenticates with the token in `token_file`.
pub fn render(url: &str, namespace: &str, token_file: &Path) -> String {
    let token_file = token_file.display();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: pod\n  cluster:\n    server: {url}\n\
         users:\n- name: pod\n  user:\n    tokenFile: {token_file}\ncontexts:\n- name: pod\n  context:\n    \
         cluster: pod\n    user: pod\n    namespace: {namespace}\ncurrent-context: pod\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reads_the_token_file_from_the_rendered_kubeconfig() {
        let text = render("http://127.0.0.1:1234", "demo", Path::new("/run/pod/serviceaccount/token"));
        let cfg: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        let user = cfg.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/run/pod/serviceaccount/token"));
        assert_eq!(cfg.contexts[0].context.as_ref().unwrap().namespace.as_deref(), Some("demo"));
    }
}
