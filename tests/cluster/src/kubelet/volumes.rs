//! A pod's volumes and env, fetched through the API as the node (the Node authorizer lets a kubelet
//! read exactly the ConfigMaps and Secrets its pods reference) and written to local files.
//!
//! A container reads `/etc/sluice/source.yaml`; a local process reads `<pod dir>/<volume>/source.yaml`
//! instead (the mount path is rewritten in args and env, see [`super::template`]). Files are written
//! when the pod starts and again at each restart; a ConfigMap changed while the process runs is not
//! written again (a kubelet would, within about a minute).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use super::serviceaccount::{self, Binding};
use super::template::{EnvSource, PodIdentity, PodPlan, VolumeSource, field_value, rewrite_mounts};

/// What a pod's process gets from its volumes.
#[derive(Debug, Default)]
pub struct Materialized {
    /// `(mountPath, local dir)` pairs for rewriting.
    pub mounts: Vec<(String, PathBuf)>,
    /// The kubeconfig of its ServiceAccount token, if one is mounted.
    pub kubeconfig: Option<PathBuf>,
}

/// Where the pod's process finds the API server.
pub struct ApiEndpoint<'a> {
    pub url: &'a str,
    pub ca: &'a Path,
}

/// Writes every mounted volume into `pod_dir/<volume>/`. A missing ConfigMap or Secret that is not
/// optional is an error: the pod waits, as a kubelet keeps it in ContainerCreating.
pub async fn materialize(
    client: &kube::Client,
    pod: &PodIdentity,
    plan: &PodPlan,
    pod_dir: &Path,
    api: &ApiEndpoint<'_>,
) -> Result<Materialized> {
    let mut out = Materialized::default();
    for m in &plan.mounts {
        let dir = pod_dir.join(&m.volume);
        std::fs::create_dir_all(&dir)?;
        match &m.source {
            VolumeSource::ConfigMap { name, items, optional } => {
                if let Some(data) = config_map(client, &pod.namespace, name, *optional).await? {
                    write_items(&dir, &data, items)?;
                }
            }
            VolumeSource::Secret { name, items, optional } => {
                if let Some(data) = secret(client, &pod.namespace, name, *optional).await? {
                    write_items(&dir, &data, items)?;
                }
            }
            VolumeSource::Token { path, audience, expiration_seconds } => {
                let who = Binding {
                    namespace: &pod.namespace,
                    service_account: &plan.service_account,
                    pod: &pod.name,
                    pod_uid: &pod.uid,
                };
                let token = serviceaccount::request(client, &who, audience.as_deref(), *expiration_seconds)
                    .await
                    .with_context(|| {
                        format!("requesting a token of ServiceAccount {}", plan.service_account)
                    })?;
                let kubeconfig = serviceaccount::write(&dir, path, &token, api.url, api.ca, &pod.namespace)?;
                out.kubeconfig = Some(kubeconfig);
            }
            VolumeSource::Empty => {}
        }
        if !out.mounts.iter().any(|(path, _)| *path == m.mount_path) {
            out.mounts.push((m.mount_path.clone(), dir));
        }
    }
    Ok(out)
}

/// The process's env: `envFrom` first, then `env` (which wins), fields resolved, mount paths rewritten.
/// An entry whose source is missing and optional is skipped; a missing required one is an error.
pub async fn resolve_env(
    client: &kube::Client,
    pod: &PodIdentity,
    plan: &PodPlan,
    mounts: &[(String, PathBuf)],
) -> Result<Vec<(String, String)>> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |name: String, value: String| {
        if env.insert(name.clone(), value).is_none() {
            order.push(name);
        }
    };
    for from in &plan.env_from {
        let data = if from.secret {
            secret(client, &pod.namespace, &from.name, from.optional).await?
        } else {
            config_map(client, &pod.namespace, &from.name, from.optional).await?
        };
        for (key, value) in data.unwrap_or_default() {
            set(format!("{}{key}", from.prefix), String::from_utf8_lossy(&value).into_owned());
        }
    }
    for (name, source) in &plan.env {
        let value = match source {
            EnvSource::Value(v) => Some(v.clone()),
            EnvSource::Field(path) => field_value(path, pod),
            EnvSource::ConfigMapKey { name: cm, key, optional } => {
                config_map(client, &pod.namespace, cm, *optional)
                    .await?
                    .and_then(|d| d.get(key).map(|v| String::from_utf8_lossy(v).into_owned()))
            }
            EnvSource::SecretKey { name: s, key, optional } => secret(client, &pod.namespace, s, *optional)
                .await?
                .and_then(|d| d.get(key).map(|v| String::from_utf8_lossy(v).into_owned())),
            EnvSource::Unsupported => None,
        };
        if let Some(value) = value {
            set(name.clone(), rewrite_mounts(&value, mounts));
        }
    }
    Ok(order.into_iter().filter_map(|k| Some((k.clone(), env.get(&k)?.clone()))).collect())
}

type Data = BTreeMap<String, Vec<u8>>;

async fn config_map(client: &kube::Client, ns: &str, name: &str, optional: bool) -> Result<Option<Data>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let Some(cm) = fetch(api.get_opt(name).await, "ConfigMap", name, optional)? else { return Ok(None) };
    let mut data: Data = cm.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    data.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
    Ok(Some(data))
}

async fn secret(client: &kube::Client, ns: &str, name: &str, optional: bool) -> Result<Option<Data>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let Some(secret) = fetch(api.get_opt(name).await, "Secret", name, optional)? else { return Ok(None) };
    let mut data: Data = secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    data.extend(secret.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
    Ok(Some(data))
}

fn fetch<T>(got: kube::Result<Option<T>>, kind: &str, name: &str, optional: bool) -> Result<Option<T>> {
    match got.with_context(|| format!("reading {kind} {name}"))? {
        Some(object) => Ok(Some(object)),
        None if optional => Ok(None),
        None => anyhow::bail!("{kind} {name} not found"),
    }
}

fn write_items(dir: &Path, data: &Data, items: &[(String, String)]) -> std::io::Result<()> {
    let chosen: Vec<(&str, &[u8])> = if items.is_empty() {
        data.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect()
    } else {
        items.iter().filter_map(|(key, path)| Some((path.as_str(), data.get(key)?.as_slice()))).collect()
    };
    for (rel, content) in chosen {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}
