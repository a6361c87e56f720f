//! Kubeconfig files: how every client here (kubectl, kube-rs, the control plane's own components, the
//! operator and the readers) finds the API server and proves who it is.
//!
//! The server is the API server's TLS port on loopback, verified against the test CA; a client proves
//! its identity with a client certificate (components, the node, the administrator) or a bearer token
//! read from a file (ServiceAccounts: the operator and the pods), as on a real cluster.

use std::path::Path;

use crate::pki::KeyPair;

/// How a kubeconfig's user authenticates.
#[derive(Debug, Clone, Copy)]
pub enum Credentials<'a> {
    /// A client certificate and its key.
    Certificate(&'a KeyPair),
    /// A bearer token re-read from this file (as a projected ServiceAccount token is).
    TokenFile(&'a Path),
}

/// A kubeconfig for `server` (an `https://` URL) trusting `ca`, with `namespace` as the default.
pub fn render(server: &str, ca: &Path, who: Credentials<'_>, namespace: &str) -> String {
    let user = match who {
        Credentials::Certificate(pair) => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            pair.cert.display(),
            pair.key.display()
        ),
        Credentials::TokenFile(file) => format!("    tokenFile: {}\n", file.display()),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: sluice\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: sluice\n  user:\n{user}contexts:\n- name: sluice\n  \
         context:\n    cluster: sluice\n    user: sluice\n    namespace: {namespace}\ncurrent-context: sluice\n",
        ca = ca.display(),
    )
}

/// Writes a kubeconfig, creating its directory.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// The same kubeconfig pointed at another server (a delay line or a cut in front of the API server):
/// every `server:` line is replaced; TLS still verifies, the certificate names 127.0.0.1.
pub fn retarget(text: &str, server: &str) -> String {
    text.lines()
        .map(|line| match line.split_once("server: ") {
            Some((indent, _)) if indent.trim().is_empty() => format!("{indent}server: {server}"),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A kube client from a kubeconfig file whose default namespace is `namespace`.
pub async fn client_in(path: &Path, namespace: &str) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(path)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.default_namespace = namespace.to_owned();
    Ok(kube::Client::try_from(config)?)
}

/// A kube client from a kubeconfig file.
pub async fn client(path: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(path)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn kube_reads_both_kinds_of_credentials() {
        let pair = KeyPair { cert: PathBuf::from("/pki/admin.crt"), key: PathBuf::from("/pki/admin.key") };
        let text =
            render("https://127.0.0.1:6443", Path::new("/pki/ca.crt"), Credentials::Certificate(&pair), "d");
        let cfg: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        let user = cfg.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/pki/admin.crt"));
        let cluster = cfg.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority.as_deref(), Some("/pki/ca.crt"));
        let text = render("https://x", Path::new("/ca"), Credentials::TokenFile(Path::new("/t")), "ns");
        let cfg: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        assert_eq!(cfg.auth_infos[0].auth_info.as_ref().unwrap().token_file.as_deref(), Some("/t"));
        assert_eq!(cfg.contexts[0].context.as_ref().unwrap().namespace.as_deref(), Some("ns"));
        let moved: kube::config::Kubeconfig =
            serde_yaml::from_str(&retarget(&text, "https://127.0.0.1:9")).unwrap();
        assert_eq!(
            moved.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://127.0.0.1:9")
        );
    }
}
