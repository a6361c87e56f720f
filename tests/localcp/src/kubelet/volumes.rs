//! ConfigMap volumes written to local directories.
//!
//! A container reads `/etc/sluice/source.yaml`; a local process reads
//! `<run dir>/<pod>/<volume>/source.yaml` instead (the mount path is rewritten in args and env, see
//! [`super::template`]). Files are written when the pod starts and again at each restart; updates to a
//! ConfigMap while the process runs are not propagated (a kubelet would, within about a minute).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::template::ConfigMapMount;

/// Writes each mounted ConfigMap into `pod_dir/<volume>/` and returns `(mountPath, local dir)` pairs.
/// A missing ConfigMap is an error: the pod waits, as a kubelet keeps it in ContainerCreating.
pub async fn materialize(
    client: &kube::Client,
    namespace: &str,
    mounts: &[ConfigMapMount],
    pod_dir: &Path,
) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    for m in mounts {
        let cm = api.get(&m.config_map).await?;
        let dir = pod_dir.join(&m.volume);
        std::fs::create_dir_all(&dir)?;
        for (rel, content) in files(&cm, &m.items) {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, content)?;
        }
        out.push((m.mount_path.clone(), dir));
    }
    Ok(out)
}

/// The files a ConfigMap volume shows: every key, or only `items` under their paths.
fn files(cm: &ConfigMap, items: &[(String, String)]) -> Vec<(String, Vec<u8>)> {
    let mut all: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in cm.data.iter().flatten() {
        all.insert(k.clone(), v.clone().into_bytes());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        all.insert(k.clone(), v.0.clone());
    }
    if items.is_empty() {
        return all.into_iter().collect();
    }
    items.iter().filter_map(|(key, path)| all.get(key).map(|c| (path.clone(), c.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_select_and_rename_keys() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])),
            ..ConfigMap::default()
        };
        assert_eq!(files(&cm, &[]).len(), 2);
        let picked = files(&cm, &[("b".into(), "sub/b.txt".into())]);
        assert_eq!(picked, vec![("sub/b.txt".to_owned(), b"2".to_vec())]);
    }
}
