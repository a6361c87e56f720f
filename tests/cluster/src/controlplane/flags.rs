//! The command lines of the control plane's components: pure, so what the tests run against is
//! readable (and checked) in one place.
//!
//! The choices follow a managed cluster such as EKS rather than a bare API server: TLS only, client
//! certificates from one CA, ServiceAccount tokens signed by our key, `Node,RBAC` authorization, the
//! default admission plugins plus NodeRestriction (ValidatingAdmissionPolicy is on by default), API
//! priority and fairness on, and each controller of the controller-manager acting under its own
//! ServiceAccount. What differs, and why: one instance of each (no leader election: nothing to
//! elect against), `--unsafe-no-fsync` on etcd (the data is thrown away after the run; fsync on a
//! shared 2-core machine costs seconds per test), and loopback addresses everywhere.

use std::path::PathBuf;
use std::time::Duration;

/// The loopback ports of one control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

/// Files the components read.
#[derive(Debug, Clone)]
pub struct Files {
    pub etcd_data: PathBuf,
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    pub apiserver_cert_dir: PathBuf,
    pub controller_manager_kubeconfig: PathBuf,
    pub scheduler_kubeconfig: PathBuf,
}

/// Settings the suites vary.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// etcd compacts its history this often (the watch-expiry suite makes it short, so that a watch
    /// resumed from an old resourceVersion is answered 410 Gone); `None`: the API server's own
    /// compaction every 5 minutes.
    pub compaction: Option<Duration>,
    /// Extra `--flag=value` arguments for kube-apiserver.
    pub apiserver_args: Vec<String>,
}

/// The ServiceAccount token issuer: what a cluster's pods see in their tokens' `iss`.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// etcd: one member on loopback.
pub fn etcd(ports: Ports, files: &Files) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        "--name=default".into(),
        format!("--data-dir={}", s(&files.etcd_data)),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=default={peer}"),
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// kube-apiserver.
pub fn apiserver(ports: Ports, files: &Files, tuning: &Tuning) -> Vec<String> {
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.apiserver),
        format!("--cert-dir={}", s(&files.apiserver_cert_dir)),
        format!("--tls-cert-file={}", s(&files.serving_cert)),
        format!("--tls-private-key-file={}", s(&files.serving_key)),
        format!("--client-ca-file={}", s(&files.ca_cert)),
        format!("--service-account-issuer={ISSUER}"),
        format!("--service-account-key-file={}", s(&files.sa_pub)),
        format!("--service-account-signing-key-file={}", s(&files.sa_key)),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--enable-priority-and-fairness=true".into(),
        // The `kubernetes` Service's endpoints would have to name a routable address; nothing
        // routes to this API server but loopback, and no pod here dials the Service.
        "--endpoint-reconciler-type=none".into(),
    ];
    if let Some(every) = tuning.compaction {
        args.push(format!("--etcd-compaction-interval={}s", every.as_secs().max(1)));
    }
    args.extend(tuning.apiserver_args.iter().cloned());
    args
}

/// kube-controller-manager: its default controllers (Deployments and ReplicaSets, garbage collection,
/// namespaces, ServiceAccounts and their tokens, PodDisruptionBudgets, node lifecycle, ...).
pub fn controller_manager(ports: Ports, files: &Files) -> Vec<String> {
    let kubeconfig = s(&files.controller_manager_kubeconfig);
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.controller_manager),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", s(&files.sa_key)),
        format!("--root-ca-file={}", s(&files.ca_cert)),
        // Every controller on by default (those that need a cloud or node CIDRs stay off by themselves).
        "--controllers=*".into(),
        // The suites create and delete many Deployments at once; the defaults (20/s, burst 30) are
        // for a cluster of a few hundred nodes and would make the tests wait on the controllers.
        "--kube-api-qps=100".into(),
        "--kube-api-burst=200".into(),
    ]
}

/// kube-scheduler.
pub fn scheduler(ports: Ports, files: &Files) -> Vec<String> {
    let kubeconfig = s(&files.scheduler_kubeconfig);
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.scheduler),
        "--leader-elect=false".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Files {
        let p = |s: &str| PathBuf::from(format!("/cp/{s}"));
        Files {
            etcd_data: p("etcd"),
            ca_cert: p("ca.crt"),
            serving_cert: p("apiserver.crt"),
            serving_key: p("apiserver.key"),
            sa_key: p("sa.key"),
            sa_pub: p("sa.pub"),
            apiserver_cert_dir: p("certs"),
            controller_manager_kubeconfig: p("kcm.kubeconfig"),
            scheduler_kubeconfig: p("sched.kubeconfig"),
        }
    }

    const PORTS: Ports =
        Ports { etcd_client: 1, etcd_peer: 2, apiserver: 3, controller_manager: 4, scheduler: 5 };

    #[test]
    fn the_api_server_authorizes_like_a_managed_cluster() {
        let args = apiserver(PORTS, &files(), &Tuning::default());
        assert!(args.contains(&"--authorization-mode=Node,RBAC".to_owned()));
        assert!(args.contains(&"--enable-admission-plugins=NodeRestriction".to_owned()));
        assert!(args.contains(&"--etcd-servers=http://127.0.0.1:1".to_owned()));
        assert!(args.iter().all(|a| !a.starts_with("--etcd-compaction-interval")));
        let tuned = Tuning { compaction: Some(Duration::from_secs(5)), apiserver_args: vec!["--x=y".into()] };
        let args = apiserver(PORTS, &files(), &tuned);
        assert!(args.contains(&"--etcd-compaction-interval=5s".to_owned()));
        assert_eq!(args.last().map(String::as_str), Some("--x=y"));
    }

    #[test]
    fn every_component_listens_on_loopback_only() {
        let all = [
            etcd(PORTS, &files()),
            apiserver(PORTS, &files(), &Tuning::default()),
            controller_manager(PORTS, &files()),
            scheduler(PORTS, &files()),
        ];
        for args in all {
            for arg in args.iter().filter(|a| a.contains("listen") || a.contains("bind-address")) {
                assert!(arg.contains("127.0.0.1"), "{arg}");
            }
        }
    }
}
