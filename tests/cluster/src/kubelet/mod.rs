//! The process kubelet: the one stand-in left in the test cluster, for the node.
//!
//! With no container runtime on these machines, it does a kubelet's part with local processes, through
//! the API server only, under a node identity (`system:node:<name>` in `system:nodes`, so the Node
//! authorizer and NodeRestriction judge it as they judge a kubelet). It registers a Node and renews
//! its Lease; runs each pod the scheduler binds to it as a process (the first container's `command` +
//! `args`, its env with `envFrom`, ConfigMap and Secret keys and the downward API, ConfigMap, Secret
//! and projected ServiceAccount-token volumes as files); probes readiness and liveness over HTTP or
//! TCP; restarts crashed containers with back-off; honours `terminationGracePeriodSeconds` (SIGTERM,
//! then SIGKILL) and issues the final delete; and writes pod status (phase, conditions, container
//! state, `restartCount`).
//!
//! Not reproduced: images (the program is looked up by basename in a bin dir; a container needs a
//! `command`), cgroups (no resource limits, no OOM kills), network namespaces (every pod's IP is
//! 127.0.0.1, and each declared container port gets its own loopback port, rewritten into listen
//! addresses in args and env), init and sidecar containers (only the first container runs), exec
//! probes, ConfigMap updates reaching running pods, token refresh (tokens last an hour; the suites
//! are shorter), `kubectl logs` / `exec` (the logs are files under the kubelet's directory), and
//! eviction on node pressure. The container's environment starts empty but for `PATH`, `HOME` and
//! [`Config::pod_env`], the node's own settings (on EKS, what the instance profile provides).

mod node;
mod probe;
mod process;
mod runner;
pub mod serviceaccount;
pub mod status;
pub mod template;
mod volumes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the kubelet writes into a pod's log when it SIGKILLs the container at the end of its grace
/// period (a drain that did not finish in time).
pub const SIGKILL_NOTE: &str = "sluice-kubelet: grace period over: SIGKILL";

/// How the kubelet behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// The Node's name.
    pub node_name: String,
    /// Where programs are looked up by basename (e.g. `target/debug`); `None`: as written.
    pub bin_dir: Option<PathBuf>,
    /// Holds `logs/<namespace>_<pod>.log`, `pods/<namespace>_<pod>/` (volumes) and `pods.json`.
    pub dir: PathBuf,
    /// The API server's URL, for the pods' own kubeconfigs.
    pub api_url: String,
    /// The CA the pods trust.
    pub ca: PathBuf,
    /// Env every container starts with (the node's settings: AWS region and credentials here).
    pub pod_env: Vec<(String, String)>,
    /// Supervision period.
    pub tick: Duration,
    /// First restart delay after a crash (doubles per restart).
    pub restart_backoff: Duration,
    /// Longest restart delay.
    pub max_backoff: Duration,
    /// Where the pod list is written after every tick (for harnesses in other processes).
    pub pods_file: Option<PathBuf>,
}

impl Config {
    /// Defaults with everything under `dir`.
    pub fn in_dir(dir: &std::path::Path, node_name: &str, api_url: &str, ca: &std::path::Path) -> Self {
        Self {
            node_name: node_name.to_owned(),
            bin_dir: None,
            dir: dir.to_owned(),
            api_url: api_url.to_owned(),
            ca: ca.to_owned(),
            pod_env: Vec::new(),
            tick: Duration::from_millis(200),
            // A kubelet starts at 10 s; the suites crash readers on purpose and wait for them back,
            // so the first restart comes after 1 s (doubling to the cap, as a kubelet's does).
            restart_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            pods_file: Some(dir.join("pods.json")),
        }
    }
}

/// One pod as the kubelet sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    /// The Deployment (or other owner) it belongs to.
    pub deployment: String,
    pub uid: String,
    /// OS pid while running.
    pub pid: Option<u32>,
    /// Container restarts.
    pub restarts: u32,
    /// Being stopped.
    pub terminating: bool,
    /// Readiness, as reported.
    pub ready: bool,
    /// How the last run ended (`exit status: 0`).
    pub last_exit: Option<String>,
    /// Its log file.
    pub log: PathBuf,
    /// Container port → the loopback port it listens on.
    pub ports: BTreeMap<i32, u16>,
}

/// A running process kubelet.
pub struct Kubelet {
    stop: CancellationToken,
    task: JoinHandle<()>,
    pods: Arc<Mutex<Vec<PodInfo>>>,
}

impl Kubelet {
    /// Registers the Node and starts running its pods. `client` must authenticate as the node.
    pub async fn start(client: kube::Client, config: Config) -> anyhow::Result<Self> {
        std::fs::create_dir_all(config.dir.join("logs"))?;
        std::fs::create_dir_all(config.dir.join("pods"))?;
        node::register(&client, &config.node_name).await?;
        node::renew_lease(&client, &config.node_name).await?;
        let stop = CancellationToken::new();
        let pods = Arc::new(Mutex::new(Vec::new()));
        let runner = runner::Runner::new(client, config, Arc::clone(&pods));
        let task = tokio::spawn(runner.run(stop.clone()));
        Ok(Self { stop, task, pods })
    }

    /// The pods as of the last tick.
    pub fn pods(&self) -> Vec<PodInfo> {
        self.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Stops every process (each within its grace period) and the kubelet.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The pod list a kubelet last wrote to its `pods_file`.
pub fn read_pods_file(path: &std::path::Path) -> Vec<PodInfo> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Now, as the API's timestamps (RFC 3339, seconds).
pub(crate) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap_or_default().to_string()
}

/// Now, as a Lease's `MicroTime`.
pub(crate) fn now_micros() -> String {
    let t = k8s_openapi::jiff::Timestamp::now();
    format!("{}", t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
}
