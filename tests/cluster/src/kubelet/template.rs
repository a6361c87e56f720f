//! What to run for a pod bound to our node: pure translation of its spec, no processes or API calls.
//!
//! A pod's first container becomes a local process. The image is not pulled: `command` + `args` name
//! the program, looked up by basename in the kubelet's bin dir (so `/usr/local/bin/sluice-reader` in a
//! manifest runs `target/debug/sluice-reader`). Env entries are resolved as the kubelet resolves them
//! (literals, the downward API, ConfigMap and Secret keys). Volumes become local directories, and
//! since a process cannot see `/etc/sluice`, every occurrence of a mount path in the args and env
//! values is rewritten to its directory. Processes share the node's network, so each declared
//! container port gets a free loopback port of its own, and listen addresses of the pod network
//! (`0.0.0.0:PORT`, `[::]:PORT`) in args and env are rewritten to it; probes go there too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A volume the container mounts, by what fills it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    /// A ConfigMap's keys (`items`: key → relative path; empty: every key under its own name).
    ConfigMap { name: String, items: Vec<(String, String)>, optional: bool },
    /// A Secret's keys, likewise.
    Secret { name: String, items: Vec<(String, String)>, optional: bool },
    /// A projected ServiceAccount token (what the ServiceAccount admission plugin adds to every pod
    /// that automounts one): `path` is the token's file name in the volume.
    Token { path: String, audience: Option<String>, expiration_seconds: Option<i64> },
    /// Anything else (emptyDir and the like): an empty directory.
    Empty,
}

/// One mounted volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Volume name.
    pub volume: String,
    /// Where the container expects it.
    pub mount_path: String,
    /// What fills it; a projected volume yields one mount per source, all at `mount_path`.
    pub source: VolumeSource,
}

/// One env entry, before resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSource {
    /// A literal value.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath`.
    Field(String),
    /// `valueFrom.configMapKeyRef`.
    ConfigMapKey { name: String, key: String, optional: bool },
    /// `valueFrom.secretKeyRef`.
    SecretKey { name: String, key: String, optional: bool },
    /// `resourceFieldRef` and other sources the stand-in does not resolve (the entry is skipped).
    Unsupported,
}

/// `envFrom`: every key of a ConfigMap or Secret, with an optional prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFrom {
    pub secret: bool,
    pub name: String,
    pub prefix: String,
    pub optional: bool,
}

/// An HTTP or TCP probe of the container, on a container port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// `httpGet.path`; `None` for a TCP probe.
    pub path: Option<String>,
    /// The container port probed.
    pub port: i32,
    pub initial_delay_seconds: u64,
    pub period_seconds: u64,
    pub timeout_seconds: u64,
    pub failure_threshold: u32,
    pub success_threshold: u32,
}

/// The runnable form of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    /// Container name (of the first container).
    pub container: String,
    /// Its image, reported back in the status as a kubelet does.
    pub image: String,
    /// `command[0]`.
    pub program: String,
    /// The rest of `command`, then `args`.
    pub args: Vec<String>,
    /// Env entries in order.
    pub env: Vec<(String, EnvSource)>,
    /// `envFrom` in order (explicit `env` entries win).
    pub env_from: Vec<EnvFrom>,
    /// Volumes the container mounts.
    pub mounts: Vec<Mount>,
    /// Declared container ports.
    pub ports: Vec<i32>,
    pub readiness: Option<ProbeSpec>,
    pub liveness: Option<ProbeSpec>,
    /// `terminationGracePeriodSeconds` (default 30).
    pub grace_seconds: u64,
    /// `restartPolicy` (default Always).
    pub restart_policy: String,
    /// `spec.serviceAccountName` (default `default`).
    pub service_account: String,
}

/// Reads the first container of a pod. An error names what cannot run here.
pub fn plan(pod: &Pod) -> Result<PodPlan, String> {
    let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
    let container: &Container = spec.containers.first().ok_or("the pod has no container")?;
    let mut command = container.command.clone().unwrap_or_default();
    if command.is_empty() {
        return Err(format!(
            "container {} has no command (the process kubelet runs no image entrypoints)",
            container.name
        ));
    }
    let program = command.remove(0);
    let mut args = command;
    args.extend(container.args.clone().unwrap_or_default());
    let ports: Vec<i32> = container.ports.iter().flatten().map(|p| p.container_port).collect();
    let named: BTreeMap<String, i32> =
        container.ports.iter().flatten().filter_map(|p| Some((p.name.clone()?, p.container_port))).collect();
    Ok(PodPlan {
        container: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        program,
        args,
        env: container.env.iter().flatten().map(|e| (e.name.clone(), env_source(e))).collect(),
        env_from: container
            .env_from
            .iter()
            .flatten()
            .filter_map(|f| {
                let prefix = f.prefix.clone().unwrap_or_default();
                if let Some(c) = &f.config_map_ref {
                    return Some(EnvFrom {
                        secret: false,
                        name: c.name.clone(),
                        prefix,
                        optional: c.optional == Some(true),
                    });
                }
                let s = f.secret_ref.as_ref()?;
                Some(EnvFrom {
                    secret: true,
                    name: s.name.clone(),
                    prefix,
                    optional: s.optional == Some(true),
                })
            })
            .collect(),
        mounts: mounts(pod, container),
        ports,
        readiness: container.readiness_probe.as_ref().and_then(|p| probe(p, &named)),
        liveness: container.liveness_probe.as_ref().and_then(|p| probe(p, &named)),
        grace_seconds: spec.termination_grace_period_seconds.map_or(30, |s| u64::try_from(s).unwrap_or(0)),
        restart_policy: spec.restart_policy.clone().unwrap_or_else(|| "Always".to_owned()),
        service_account: spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_owned()),
    })
}

fn env_source(e: &k8s_openapi::api::core::v1::EnvVar) -> EnvSource {
    match (&e.value, &e.value_from) {
        (Some(v), _) => EnvSource::Value(v.clone()),
        (None, Some(from)) => {
            if let Some(f) = &from.field_ref {
                EnvSource::Field(f.field_path.clone())
            } else if let Some(c) = &from.config_map_key_ref {
                EnvSource::ConfigMapKey {
                    name: c.name.clone(),
                    key: c.key.clone(),
                    optional: c.optional == Some(true),
                }
            } else if let Some(s) = &from.secret_key_ref {
                EnvSource::SecretKey {
                    name: s.name.clone(),
                    key: s.key.clone(),
                    optional: s.optional == Some(true),
                }
            } else {
                EnvSource::Unsupported
            }
        }
        (None, None) => EnvSource::Value(String::new()),
    }
}

fn items(items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>) -> Vec<(String, String)> {
    items.into_iter().flatten().map(|i| (i.key.clone(), i.path.clone())).collect()
}

fn mounts(pod: &Pod, container: &Container) -> Vec<Mount> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else { continue };
        let mut push = |source| {
            out.push(Mount { volume: v.name.clone(), mount_path: m.mount_path.clone(), source });
        };
        if let Some(cm) = &v.config_map {
            push(VolumeSource::ConfigMap {
                name: cm.name.clone(),
                items: items(cm.items.as_ref()),
                optional: cm.optional == Some(true),
            });
        } else if let Some(secret) = &v.secret {
            push(VolumeSource::Secret {
                name: secret.secret_name.clone().unwrap_or_default(),
                items: items(secret.items.as_ref()),
                optional: secret.optional == Some(true),
            });
        } else if let Some(projected) = &v.projected {
            for source in projected.sources.iter().flatten() {
                if let Some(t) = &source.service_account_token {
                    push(VolumeSource::Token {
                        path: t.path.clone(),
                        audience: t.audience.clone(),
                        expiration_seconds: t.expiration_seconds,
                    });
                } else if let Some(cm) = &source.config_map {
                    push(VolumeSource::ConfigMap {
                        name: cm.name.clone(),
                        items: items(cm.items.as_ref()),
                        optional: cm.optional == Some(true),
                    });
                } else if let Some(secret) = &source.secret {
                    push(VolumeSource::Secret {
                        name: secret.name.clone(),
                        items: items(secret.items.as_ref()),
                        optional: secret.optional == Some(true),
                    });
                }
            }
        } else {
            push(VolumeSource::Empty);
        }
    }
    out
}

fn probe(p: &Probe, named: &BTreeMap<String, i32>) -> Option<ProbeSpec> {
    let (path, port) = if let Some(http) = &p.http_get {
        (Some(http.path.clone().unwrap_or_else(|| "/".to_owned())), &http.port)
    } else {
        (None, &p.tcp_socket.as_ref()?.port)
    };
    let port = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => *named.get(name)?,
    };
    let secs = |v: Option<i32>, default: u64| v.map_or(default, |s| u64::try_from(s).unwrap_or(default));
    let count = |v: Option<i32>, default: u32| v.map_or(default, |s| u32::try_from(s).unwrap_or(default));
    Some(ProbeSpec {
        path,
        port,
        initial_delay_seconds: secs(p.initial_delay_seconds, 0),
        period_seconds: secs(p.period_seconds, 10).max(1),
        timeout_seconds: secs(p.timeout_seconds, 1).max(1),
        failure_threshold: count(p.failure_threshold, 3).max(1),
        success_threshold: count(p.success_threshold, 1).max(1),
    })
}

/// What the downward API gives a pod.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub node: String,
    pub service_account: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Resolves a `fieldRef` path; `None` for paths the stand-in does not know.
pub fn field_value(path: &str, pod: &PodIdentity) -> Option<String> {
    let label = |prefix: &str, map: &BTreeMap<String, String>| {
        let key = path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']")?;
        map.get(key).cloned()
    };
    match path {
        "metadata.name" => Some(pod.name.clone()),
        "metadata.namespace" => Some(pod.namespace.clone()),
        "metadata.uid" => Some(pod.uid.clone()),
        "spec.nodeName" => Some(pod.node.clone()),
        "spec.serviceAccountName" => Some(pod.service_account.clone()),
        "status.podIP" | "status.hostIP" => Some("127.0.0.1".to_owned()),
        _ => {
            label("metadata.labels", &pod.labels).or_else(|| label("metadata.annotations", &pod.annotations))
        }
    }
}

/// Rewrites a listen address of the pod network to loopback: `0.0.0.0:P` or `[::]:P` (alone, or as
/// the value of `--flag=`) becomes `127.0.0.1:H` where `ports` maps container port P to host port H,
/// or `127.0.0.1:0` (any free port) for an undeclared port. Everything else is left alone.
pub fn rewrite_listen_addr(s: &str, ports: &BTreeMap<i32, u16>) -> String {
    let (prefix, value) = match s.rsplit_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (format!("{flag}="), value),
        _ => (String::new(), s),
    };
    match value.strip_prefix("0.0.0.0:").or_else(|| value.strip_prefix("[::]:")) {
        Some(port) => match port.parse::<i32>() {
            Ok(p) => format!("{prefix}127.0.0.1:{}", ports.get(&p).copied().unwrap_or(0)),
            Err(_) => s.to_owned(),
        },
        None => s.to_owned(),
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

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "src-reader-abc-xyz12", "namespace": "ns", "uid": "u1"},
            "spec": {"terminationGracePeriodSeconds": 5, "nodeName": "n1", "serviceAccountName": "src-reader",
                "volumes": [{"name": "cfg", "configMap": {"name": "src-config"}},
                            {"name": "kube-api-access-x", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
                "containers": [{"name": "reader", "image": "ghcr.io/sluice-dev/sluice:0.1.0",
                    "command": ["/usr/local/bin/sluice-reader"],
                    "args": ["--source", "/etc/sluice/source.yaml", "--admin-addr", "[::]:8080"],
                    "ports": [{"name": "admin", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, "periodSeconds": 5},
                    "livenessProbe": {"tcpSocket": {"port": 8080}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/sluice"},
                        {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "AWS_"}],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "CFG", "value": "/etc/sluice/source.yaml"},
                            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}
        }))
        .unwrap()
    }

    #[test]
    fn plan_reads_command_env_volumes_ports_and_probes() {
        let p = plan(&pod()).unwrap();
        assert_eq!(p.program, "/usr/local/bin/sluice-reader");
        assert_eq!(p.args[..2], ["--source", "/etc/sluice/source.yaml"]);
        assert_eq!((p.grace_seconds, p.restart_policy.as_str()), (5, "Always"));
        assert_eq!(p.service_account, "src-reader");
        assert_eq!(p.ports, vec![8080]);
        let ready = p.readiness.unwrap();
        assert_eq!((ready.path.as_deref(), ready.port, ready.period_seconds), (Some("/readyz"), 8080, 5));
        assert_eq!(p.liveness.unwrap().path, None);
        assert_eq!(p.mounts.len(), 3, "{:?}", p.mounts);
        assert!(matches!(&p.mounts[1].source, VolumeSource::Token { path, .. } if path == "token"));
        assert_eq!(p.env[2].1, EnvSource::SecretKey { name: "s".into(), key: "k".into(), optional: false });
        assert_eq!(
            p.env_from[0],
            EnvFrom { secret: true, name: "creds".into(), prefix: "AWS_".into(), optional: false }
        );
    }

    #[test]
    fn pod_network_listen_addresses_become_the_pods_loopback_ports() {
        let ports = BTreeMap::from([(8080, 40001_u16)]);
        assert_eq!(rewrite_listen_addr("[::]:8080", &ports), "127.0.0.1:40001");
        assert_eq!(rewrite_listen_addr("--admin-addr=0.0.0.0:8080", &ports), "--admin-addr=127.0.0.1:40001");
        assert_eq!(rewrite_listen_addr("0.0.0.0:9090", &ports), "127.0.0.1:0");
        assert_eq!(rewrite_listen_addr("10.0.0.1:9090", &ports), "10.0.0.1:9090");
        assert_eq!(rewrite_listen_addr("0.0.0.0:http", &ports), "0.0.0.0:http");
    }

    #[test]
    fn the_downward_api_resolves_names_and_labels() {
        let who = PodIdentity {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            node: "n1".into(),
            service_account: "sa".into(),
            labels: BTreeMap::from([("app".to_owned(), "r".to_owned())]),
            annotations: BTreeMap::new(),
        };
        assert_eq!(field_value("metadata.labels['app']", &who).as_deref(), Some("r"));
        assert_eq!(field_value("spec.nodeName", &who).as_deref(), Some("n1"));
        assert_eq!(field_value("metadata.labels['none']", &who), None);
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
        let mut p = pod();
        p.spec.as_mut().unwrap().containers[0].command = None;
        assert!(plan(&p).unwrap_err().contains("no command"));
    }
}
