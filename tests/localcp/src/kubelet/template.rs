//! What to run for a Deployment's pod template: pure translation, no processes or API calls.
//!
//! A pod's container becomes a local process. The image is ignored; `command` + `args` name the program
//! (looked up by basename in the runner's bin dir, so `/usr/local/bin/sluice-reader` in a manifest runs
//! `target/debug/sluice-reader`), env entries are resolved the way the downward API would resolve them,
//! and each configMap volume is materialized into a local directory: since a process cannot see
//! `/etc/sluice`, every occurrence of a volume's `mountPath` in the args and env values is rewritten to
//! that directory; a pod-network listen address (`0.0.0.0:PORT`) becomes `127.0.0.1:0`. The template hash names the pods (`<deploy>-<hash>-<rand5>`) and drives rollouts.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

/// A configMap volume mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigMapMount {
    /// Volume name.
    pub volume: String,
    /// ConfigMap name.
    pub config_map: String,
    /// Where the container expects it.
    pub mount_path: String,
    /// `items` (key → relative path); empty means every key under its own name.
    pub items: Vec<(String, String)>,
}

/// One env entry, before pod-specific resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSource {
    /// A literal value.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath`.
    Field(String),
    /// Something the runner does not resolve (configMapKeyRef, secretKeyRef, resourceFieldRef).
    Unsupported,
}

/// The runnable form of a pod template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    /// Template hash (10 characters), as in the `pod-template-hash` label.
    pub hash: String,
    /// `command[0]`.
    pub program: String,
    /// The rest of `command`, then `args`.
    pub args: Vec<String>,
    /// Env entries in order.
    pub env: Vec<(String, EnvSource)>,
    /// ConfigMap volumes the container mounts.
    pub config_maps: Vec<ConfigMapMount>,
    /// `terminationGracePeriodSeconds` (default 30).
    pub grace_seconds: u64,
    /// Labels of the template (copied onto Pod objects).
    pub labels: std::collections::BTreeMap<String, String>,
    /// `serviceAccountName` (default `default`): whose token the pod gets.
    pub service_account: String,
    /// `automountServiceAccountToken` of the pod (default true; the ServiceAccount's own setting
    /// is not read).
    pub automount_token: bool,
}

/// A stable hash of the template, in the pod-name alphabet.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    // FNV-1a: stable across runs and platforms, unlike std's RandomState.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base = ALPHABET.len() as u64;
    (0..10)
        .map(|_| {
            let c = ALPHABET[usize::try_from(h % base).unwrap_or(0)];
            h /= base;
            char::from(c)
        })
        .collect()
}

/// Reads the first container of a Deployment's template.
pub fn plan(deploy: &Deployment) -> Result<PodPlan, String> {
    let template = deploy.spec.as_ref().map(|s| &s.template).ok_or("the Deployment has no spec")?;
    let pod_spec = template.spec.as_ref().ok_or("the pod template has no spec")?;
    let container: &Container = pod_spec.containers.first().ok_or("the pod template has no container")?;
    let mut command = container.command.clone().unwrap_or_default();
    if command.is_empty() {
        return Err(format!(
            "container {} has no command (image entrypoints cannot run locally)",
            container.name
        ));
    }
    let program = command.remove(0);
    let mut args = command;
    args.extend(container.args.clone().unwrap_or_default());
    let env = container
        .env
        .iter()
        .flatten()
        .map(|e| {
            let src = match (&e.value, &e.value_from) {
                (Some(v), _) => EnvSource::Value(v.clone()),
                (None, Some(from)) => match &from.field_ref {
                    Some(f) => EnvSource::Field(f.field_path.clone()),
                    None => EnvSource::Unsupported,
                },
                (None, None) => EnvSource::Value(String::new()),
            };
            (e.name.clone(), src)
        })
        .collect();
    let volumes = pod_spec.volumes.clone().unwrap_or_default();
    let config_maps = container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let v = volumes.iter().find(|v| v.name == m.name)?;
            let cm = v.config_map.as_ref()?;
            let items = cm.items.iter().flatten().map(|i| (i.key.clone(), i.path.clone())).collect();
            Some(ConfigMapMount {
                volume: v.name.clone(),
                config_map: cm.name.clone(),
                mount_path: m.mount_path.clone(),
                items,
            })
        })
        .collect();
    Ok(PodPlan {
        hash: template_hash(template),
        program,
        args,
        env,
        config_maps,
        grace_seconds: pod_spec
            .termination_grace_period_seconds
            .map_or(30, |s| u64::try_from(s).unwrap_or(0)),
        labels: template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default(),
        service_account: pod_spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_owned()),
        automount_token: pod_spec.automount_service_account_token.unwrap_or(true),
    })
}

/// What the downward API gives a pod.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    /// Pod name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Pod uid (of the Pod object, when one is created).
    pub uid: String,
    /// `spec.serviceAccountName`.
    pub service_account: String,
}

/// Resolves a `fieldRef` path; `None` for paths the runner does not know.
pub fn field_value(path: &str, pod: &PodIdentity) -> Option<String> {
    match path {
        "metadata.name" => Some(pod.name.clone()),
        "metadata.namespace" => Some(pod.namespace.clone()),
        "metadata.uid" => Some(pod.uid.clone()),
        "spec.nodeName" => Some("localhost".to_owned()),
        "spec.serviceAccountName" => Some(pod.service_account.clone()),
        "status.podIP" | "status.hostIP" => Some("127.0.0.1".to_owned()),
        _ => None,
    }
}

/// Rewrites a listen address of the pod network to loopback with a free port: in a cluster each pod has
/// its own network namespace, so every replica may listen on `0.0.0.0:9090`; local processes share one,
/// and the tests must stay on 127.0.0.1. Only whole `0.0.0.0:PORT` or `[::]:PORT` values (or
/// `--flag=...` with one) change.
pub fn rewrite_listen_addr(s: &str) -> String {
    let (prefix, value) = match s.rsplit_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (format!("{flag}="), value),
        _ => (String::new(), s),
    };
    match value.strip_prefix("0.0.0.0:").or_else(|| value.strip_prefix("[::]:")) {
        Some(port) if port.parse::<u16>().is_ok() => format!("{prefix}127.0.0.1:0"),
        _ => s.to_owned(),
    }
}

/// Rewrites every mount path occurring in `s` to its local directory (longest mount path first).
pub fn rewrite_mounts(s: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut sorted: Vec<&(String, PathBuf)> = mounts.iter().collect();
    sorted.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    let mut out = s.to_owned();
    for (mount, dir) in sorted {
        let trimmed = mount.trim_end_matches('/');
        if !trimmed.is_empty() {
            out = out.replace(trimmed, &dir.to_string_lossy());
        }
    }
    out
}

/// The process's env for one pod: resolved fields, rewritten mount paths; unresolvable entries skipped.
pub fn resolve_env(plan: &PodPlan, pod: &PodIdentity, mounts: &[(String, PathBuf)]) -> Vec<(String, String)> {
    plan.env
        .iter()
        .filter_map(|(name, src)| {
            let v = match src {
                EnvSource::Value(v) => Some(v.clone()),
                EnvSource::Field(path) => field_value(path, pod),
                EnvSource::Unsupported => None,
            }?;
            Some((name.clone(), rewrite_mounts(&v, mounts)))
        })
        .collect()
}

/// The executable: the basename of `program` in `bin_dir` if it exists there, else `program` as written
/// (an absolute path, or a name found on `PATH`).
pub fn resolve_program(program: &str, bin_dir: Option<&Path>) -> PathBuf {
    let base = Path::new(program).file_name().map(PathBuf::from);
    if let (Some(dir), Some(base)) = (bin_dir, base) {
        let candidate = dir.join(base);
        if candidate.is_file() {
            return candidate;
        }
    }
    PathBuf::from(program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "src-reader", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "r"}},
                "template": {"metadata": {"labels": {"app": "r"}}, "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "volumes": [{"name": "cfg", "configMap": {"name": "src-config"}}],
                    "containers": [{"name": "reader", "image": "ignored",
                        "command": ["/usr/local/bin/sluice-reader"],
                        "args": ["--source", "/etc/sluice/source.yaml"],
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/sluice"}],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "CFG", "value": "/etc/sluice/source.yaml"},
                                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn plan_reads_command_env_and_config_map_mounts() {
        let p = plan(&deployment()).unwrap();
        assert_eq!(p.program, "/usr/local/bin/sluice-reader");
        assert_eq!(p.args, vec!["--source", "/etc/sluice/source.yaml"]);
        assert_eq!(p.grace_seconds, 5);
        assert_eq!(p.config_maps[0].config_map, "src-config");
        assert_eq!(p.hash.len(), 10);
        assert_eq!((p.service_account.as_str(), p.automount_token), ("default", true));
        let pod = PodIdentity {
            name: "src-reader-abc-xyz12".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            service_account: p.service_account.clone(),
        };
        let mounts = vec![("/etc/sluice".to_owned(), PathBuf::from("/tmp/run/pod/cfg"))];
        let env = resolve_env(&p, &pod, &mounts);
        assert_eq!(
            env,
            vec![
                ("POD_NAME".to_owned(), "src-reader-abc-xyz12".to_owned()),
                ("POD_NAMESPACE".to_owned(), "ns".to_owned()),
                ("CFG".to_owned(), "/tmp/run/pod/cfg/source.yaml".to_owned()),
            ]
        );
        assert_eq!(rewrite_mounts(&p.args[1], &mounts), "/tmp/run/pod/cfg/source.yaml");
    }

    #[test]
    fn pod_network_listen_addresses_become_loopback_with_a_free_port() {
        assert_eq!(rewrite_listen_addr("0.0.0.0:9090"), "127.0.0.1:0");
        assert_eq!(rewrite_listen_addr("--admin-addr=0.0.0.0:9090"), "--admin-addr=127.0.0.1:0");
        assert_eq!(rewrite_listen_addr("[::]:9090"), "127.0.0.1:0");
        assert_eq!(rewrite_listen_addr("10.0.0.1:9090"), "10.0.0.1:9090");
        assert_eq!(rewrite_listen_addr("0.0.0.0:http"), "0.0.0.0:http");
        assert_eq!(rewrite_listen_addr("--source"), "--source");
    }

    #[test]
    fn hash_changes_with_the_template_only() {
        let a = deployment();
        let mut b = a.clone();
        assert_eq!(plan(&a).unwrap().hash, plan(&b).unwrap().hash);
        b.spec.as_mut().unwrap().replicas = Some(7);
        assert_eq!(plan(&a).unwrap().hash, plan(&b).unwrap().hash, "replicas are not part of the template");
        b.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].args = Some(vec!["x".into()]);
        assert_ne!(plan(&a).unwrap().hash, plan(&b).unwrap().hash);
    }

    #[test]
    fn programs_resolve_in_the_bin_dir_by_basename() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sluice-reader"), b"").unwrap();
        assert_eq!(
            resolve_program("/usr/local/bin/sluice-reader", Some(dir.path())),
            dir.path().join("sluice-reader")
        );
        assert_eq!(resolve_program("sleep", Some(dir.path())), PathBuf::from("sleep"));
    }

    #[test]
    fn a_container_without_command_cannot_run() {
        let mut d = deployment();
        d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].command = None;
        assert!(plan(&d).unwrap_err().contains("no command"));
    }
}
