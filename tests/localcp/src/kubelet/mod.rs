//! A process runner that plays kubelet (and the Deployment controller) for the local control plane.
//!
//! With no container runtime on these machines, each replica of an `apps/v1` Deployment becomes a local
//! process started from the pod template's first container: `command` + `args` (the binary looked up by
//! basename in a bin dir such as `target/debug`, the image ignored), the container env with the downward
//! API's `fieldRef`s resolved (`metadata.name` is the pod name `<deploy>-<hash>-<rand5>`), and configMap
//! volumes written to a local directory whose path replaces the `mountPath` in args and env. It restarts
//! crashed processes with backoff, stops surplus ones with SIGTERM then SIGKILL after
//! `terminationGracePeriodSeconds`, rolls pods when the template changes (start new, retire old as the
//! new become ready), writes the Deployment status, and optionally mirrors pods as Pod objects. Given
//! the API server's URL, it mounts each pod a token of its `serviceAccountName` bound to the pod
//! and points the process's `KUBECONFIG` at it ([`serviceaccount`]), so readers reach the API as
//! their own ServiceAccount, not as the runner.
//!
//! Not reproduced: ReplicaSets, probes (a pod is ready once its process has run for `ready_after`),
//! resources and limits, init and sidecar containers (only the first container runs), image entrypoints
//! (a container needs a `command`), Secret volumes and `configMapKeyRef`/`secretKeyRef` env (skipped),
//! ConfigMap updates reaching running pods, `strategy` settings (always surge-all, maxUnavailable 0),
//! `paused`, and stopping a process when its Pod object is deleted by someone else.

mod plan;
mod podobject;
mod process;
mod runner;
pub mod serviceaccount;
pub mod template;
mod volumes;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use plan::{Actions, Counts, PodView, counts, decide};

/// How the runner behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where binaries are looked up by basename (e.g. `target/debug`); `None`: run commands as written.
    pub bin_dir: Option<PathBuf>,
    /// One `<pod>.log` per pod (stdout and stderr, across restarts).
    pub log_dir: PathBuf,
    /// Per-pod working directories, holding the materialized ConfigMap volumes.
    pub run_dir: PathBuf,
    /// Only Deployments of this namespace; `None`: all namespaces.
    pub namespace: Option<String>,
    /// Supervision period.
    pub tick: Duration,
    /// How long a process must run to count as ready.
    pub ready_after: Duration,
    /// First restart delay after a crash (doubles per restart).
    pub restart_backoff: Duration,
    /// Longest restart delay.
    pub max_backoff: Duration,
    /// Mirror pods as Pod objects in the control plane.
    pub pod_objects: bool,
    /// Also write the pod list as JSON here after every tick (for tests that run the binary).
    pub pods_file: Option<PathBuf>,
    /// URL of the API server for the pods' own kubeconfigs: with it, each pod gets a token of its
    /// ServiceAccount ([`serviceaccount`]); `None`: processes inherit the runner's environment
    /// (and so its `KUBECONFIG`, if any).
    pub api_url: Option<String>,
}

impl Config {
    /// Defaults with logs and pod directories under `dir`.
    pub fn in_dir(dir: &std::path::Path) -> Self {
        Self {
            bin_dir: None,
            log_dir: dir.join("logs"),
            run_dir: dir.join("pods"),
            namespace: None,
            tick: Duration::from_millis(200),
            ready_after: Duration::from_millis(500),
            restart_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            pod_objects: true,
            pods_file: Some(dir.join("pods.json")),
            api_url: None,
        }
    }
}

/// One pod as the runner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodInfo {
    /// Pod name (`POD_NAME` of the process).
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Owning Deployment.
    pub deployment: String,
    /// Template hash it runs.
    pub template_hash: String,
    /// OS pid while running.
    pub pid: Option<u32>,
    /// Restarts after crashes.
    pub restarts: u32,
    /// Being stopped.
    pub terminating: bool,
    /// How the last run ended.
    pub last_exit: Option<String>,
    /// Its log file.
    pub log: PathBuf,
}

/// A running process runner.
pub struct Kubelet {
    stop: CancellationToken,
    task: JoinHandle<()>,
    pods: Arc<Mutex<Vec<PodInfo>>>,
}

impl Kubelet {
    /// Starts the runner against the cluster `client` points at.
    pub fn start(client: kube::Client, config: Config) -> std::io::Result<Self> {
        std::fs::create_dir_all(&config.log_dir)?;
        std::fs::create_dir_all(&config.run_dir)?;
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

    /// Stops every process (each within its grace period) and the runner.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
