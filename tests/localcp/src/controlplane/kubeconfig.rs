//! The kubeconfig that points clients at the local control plane.
//!
//! `kube::Client::try_default()` (through `KUBECONFIG`) and kubectl both need a file, not a URL; plain
//! HTTP with an empty user sends no token, which the server takes for the administrator.

use std::path::Path;

/// Name used for the cluster, user and context entries.
pub const CONTEXT: &str = "sluice-local";

/// A kubeconfig for `url` with `namespace` as the context's default namespace.
pub fn render(url: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT}\n  cluster:\n    server: {url}\n\
         users:\n- name: {CONTEXT}\n  user: {{}}\ncontexts:\n- name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    \
         user: {CONTEXT}\n    namespace: {namespace}\ncurrent-context: {CONTEXT}\npreferences: {{}}\n"
    )
}

/// Writes the kubeconfig, creating parent directories.
pub fn write(path: &Path, url: &str, namespace: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, render(url, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reads_the_rendered_file() {
        let text = render("http://127.0.0.1:1234", "demo");
        let cfg: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        assert_eq!(cfg.current_context.as_deref(), Some(CONTEXT));
        let cluster = cfg.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("http://127.0.0.1:1234"));
        assert_eq!(cfg.contexts[0].context.as_ref().unwrap().namespace.as_deref(), Some("demo"));
    }
}
