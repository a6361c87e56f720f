//! The whole system as a suite sees it: a namespace of its own on the real test cluster, the operator
//! running there as a process with the shipped RBAC and a ServiceAccount token (never as admin), and
//! the reader pods the operator's Deployments become, run by the process kubelet.
//!
//! Why processes and not tasks: the end-to-end suites must prove that the binaries work together
//! through a Kubernetes API under faults (SIGKILL, restarts, rollouts), which only separate processes
//! show. The demo drives the same harness, so what users see is what the suites test.
//!
//! The cluster is the one the test command started (`SLUICE_CLUSTER` names its directory) or, when a
//! suite runs on its own, a private one this harness starts with `sluice-controlplane up`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;
use sluice_crds::SqsSource;

use crate::cluster::{Cluster, Info};
use crate::controlplane::stop_process;
use crate::install;
use crate::kubeconfig;
use crate::kubelet::PodInfo;
use crate::poll::{self, Check};

mod events;

/// Field manager of what the harness applies (the user's `kubectl apply`).
const MANAGER: &str = "sluice-e2e";

/// The reader's admin container port (`--admin-addr [::]:8080`).
const READER_ADMIN_PORT: i32 = 8080;

/// A running system in one namespace. Dropping it stops the operator and deletes the namespace
/// (garbage collection removes the readers, the kubelet stops their processes).
pub struct System {
    state_dir: PathBuf,
    info: Info,
    /// The private cluster's `sluice-controlplane up`, when the test command started none.
    private: Option<Child>,
    operator_kubeconfig: PathBuf,
    /// The operator replicas running now (usually one; a failover suite runs two).
    operators: Vec<OperatorProcess>,
    operator_starts: u32,
    /// Arguments given to every operator started from now on, after the suite's own (a benchmark
    /// tries `--reconciles-at-once` this way).
    pub operator_args: Vec<String>,
    /// The operator binary started from now on (by default `sluice-operator` beside the others; a
    /// benchmark may run a release build).
    pub operator_binary: PathBuf,
    /// A client of the cluster as its administrator (what the suite does as the user).
    pub client: kube::Client,
    /// The suite's namespace.
    pub namespace: String,
}

/// Where the binaries of this build are (`target/debug`, say): the directory of the running
/// executable, or its parent for a test executable or an example (those sit in `deps/` or
/// `examples/` below it). The suites and benchmarks run the binaries built beside them, whichever
/// package they belong to.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running executable");
    let dir = exe.parent().expect("an executable lives in a directory");
    let nested = dir.file_name().is_some_and(|n| n == "deps" || n == "examples");
    if nested { dir.parent().unwrap_or(dir) } else { dir }.to_owned()
}

impl System {
    /// How a suite starts: the binaries of [`bin_dir`], an emptied `state_dir` (kept after the run, so a
    /// failure's logs can be read), and the operator running.
    pub async fn start_with_operator(state_dir: &Path) -> Result<Self> {
        let _ = std::fs::remove_dir_all(state_dir);
        let mut system = Self::start(&bin_dir(), state_dir).await?;
        system.start_operator()?;
        Ok(system)
    }

    /// Finds (or starts) the cluster, makes the suite's namespace and installs the operator's
    /// identity and permissions in it, as deploy/operator ships them.
    pub async fn start(bin_dir: &Path, state_dir: &Path) -> Result<Self> {
        for bin in ["sluice-controlplane", "sluice-operator", "sluice-reader"] {
            if !bin_dir.join(bin).is_file() {
                bail!(
                    "{} is missing: build the binaries first with `cargo build --workspace --bins`",
                    bin_dir.join(bin).display()
                );
            }
        }
        std::fs::create_dir_all(state_dir)?;
        let state_dir = std::path::absolute(state_dir)?;
        let (info, private) = match std::env::var_os("SLUICE_CLUSTER") {
            Some(dir) => (Cluster::attach(Path::new(&dir))?.info, None),
            None => start_private(bin_dir, &state_dir.join("cluster")).await?,
        };
        Self::start_on(bin_dir, &state_dir, info, private).await
    }

    /// Like [`Self::start`], on the cluster `info` describes (one the suite runs itself, say on
    /// another Kubernetes version).
    pub async fn start_on(
        bin_dir: &Path,
        state_dir: &Path,
        info: Info,
        private: Option<Child>,
    ) -> Result<Self> {
        std::fs::create_dir_all(state_dir)?;
        let state_dir = std::path::absolute(state_dir)?;
        let namespace = format!("e2e-{}", random_suffix());
        // The suite's namespace is the client's default: `Api::default_namespaced` finds its objects.
        let client = kubeconfig::client_in(&info.admin_kubeconfig, &namespace).await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?;
        namespaces.create(&PostParams::default(), &ns).await.context("creating the suite's namespace")?;
        install::operator_rbac(&client, &namespace).await?;
        let operator_kubeconfig = state_dir.join("operator.kubeconfig");
        let operator = install::operator_service_account()?;
        install::account_kubeconfig(
            &client,
            &info.url,
            &info.ca,
            &namespace,
            &operator,
            &operator_kubeconfig,
        )
        .await?;
        std::fs::write(state_dir.join("namespace"), &namespace)?;
        Ok(Self {
            state_dir,
            info,
            private,
            operator_kubeconfig,
            operators: Vec::new(),
            operator_starts: 0,
            operator_args: Vec::new(),
            operator_binary: bin_dir.join("sluice-operator"),
            client,
            namespace,
        })
    }

    /// Starts (or restarts) the operator process: serving the suite's namespace, with its leader
    /// Lease there, authenticated by its ServiceAccount's token. Its log goes to `operator-N.log`.
    pub fn start_operator(&mut self) -> Result<()> {
        if !self.operators.is_empty() {
            bail!("the operator is already running");
        }
        self.start_operator_replica().map(drop)
    }

    /// Starts one more operator replica beside those running (a standby while another holds the
    /// Lease), as a second pod of the operator's Deployment would be; answers its identity in the
    /// Lease (`operator-N`, its log `operator-N.log`).
    pub fn start_operator_replica(&mut self) -> Result<String> {
        self.operator_starts += 1;
        let identity = format!("operator-{}", self.operator_starts);
        let log = std::fs::File::create(self.operator_log(&identity))?;
        let child = Command::new(&self.operator_binary)
            .args(["--admin-addr", "127.0.0.1:0", "--reader-image", "sluice:local"])
            .args(["--leader-election", "on", "--lease-namespace", &self.namespace])
            .args(["--namespace", &self.namespace])
            .args(["--identity", &identity])
            .args(&self.operator_args)
            .env("KUBECONFIG", &self.operator_kubeconfig)
            .env("RUST_LOG", "info")
            .envs(aws_test_env())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting sluice-operator")?;
        self.operators.push(OperatorProcess { identity: identity.clone(), child });
        Ok(identity)
    }

    /// The log file of the operator replica `identity`.
    pub fn operator_log(&self, identity: &str) -> PathBuf {
        self.state_dir.join(format!("{identity}.log"))
    }

    /// Where the operator replica `identity` serves `/metrics` and `/readyz` (it binds port 0 and
    /// logs the address), once it has said so.
    pub fn operator_admin_addr(&self, identity: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.operator_log(identity)).ok()?;
        let line = text.lines().rfind(|l| l.contains("admin server listening"))?;
        let at = line.find("127.0.0.1:")?;
        let tail = &line[at..];
        let end = tail.find(|c: char| c.is_whitespace()).unwrap_or(tail.len());
        Some(tail[..end].to_owned())
    }

    /// Identities of the operator replicas running (or exited and not yet reaped).
    pub fn operator_identities(&self) -> Vec<String> {
        self.operators.iter().map(|o| o.identity.clone()).collect()
    }

    /// Stops every operator replica with `signal` (SIGTERM: graceful; SIGKILL: a crash) and waits.
    pub fn stop_operator(&mut self, signal: Signal) -> Result<()> {
        for operator in self.operators.drain(..) {
            stop_process(operator.child, signal, Duration::from_secs(15));
        }
        Ok(())
    }

    /// Stops the operator replica `identity` with `signal` and waits for it.
    pub fn stop_operator_replica(&mut self, identity: &str, signal: Signal) -> Result<()> {
        let Some(at) = self.operators.iter().position(|o| o.identity == identity) else {
            bail!("no operator replica {identity} runs");
        };
        stop_process(self.operators.remove(at).child, signal, Duration::from_secs(15));
        Ok(())
    }

    /// How an operator process ended, if one has (reaping it): a pod's kubelet would restart it.
    pub fn operator_exit(&mut self) -> Option<String> {
        let at = self.operators.iter_mut().position(|o| matches!(o.child.try_wait(), Ok(Some(_))))?;
        let mut ended = self.operators.remove(at);
        ended.child.try_wait().ok().flatten().map(|status| status.to_string())
    }

    /// The first operator replica's process id while it runs (to read its CPU time and memory
    /// from `/proc`).
    pub fn operator_pid(&self) -> Option<u32> {
        self.operators.first().map(|o| o.child.id())
    }

    /// The log file of the first operator replica running.
    pub fn first_operator_log(&self) -> Option<PathBuf> {
        self.operators.first().map(|o| self.operator_log(&o.identity))
    }

    /// The operator's kubeconfig (its ServiceAccount token), for suites that start more operators.
    pub fn operator_kubeconfig(&self) -> &Path {
        &self.operator_kubeconfig
    }

    /// Applies an SqsSource manifest (YAML) in [`Self::namespace`].
    pub async fn apply_source(&self, yaml: &str) -> Result<SqsSource> {
        let mut source: SqsSource = serde_yaml::from_str(yaml).context("parsing the SqsSource manifest")?;
        let name = source.metadata.name.clone().context("the SqsSource needs metadata.name")?;
        // As `kubectl apply -n`: the API server refuses a body naming another namespace than the URL.
        source.metadata.namespace = Some(self.namespace.clone());
        let api: Api<SqsSource> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&source)).await?)
    }

    /// Deletes an SqsSource; garbage collection removes its children, the kubelet its processes.
    pub async fn delete_source(&self, name: &str) -> Result<()> {
        let api: Api<SqsSource> = Api::namespaced(self.client.clone(), &self.namespace);
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// The reader Deployment of a source, if it exists.
    pub async fn reader_deployment(&self, source: &str) -> Result<Option<Deployment>> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api.get_opt(&format!("{source}-reader")).await?)
    }

    /// `spec.replicas` of the reader Deployment of `source`, if it exists: what the autoscaler asked for.
    pub async fn reader_replicas(&self, source: &str) -> Result<Option<i32>> {
        Ok(self.reader_deployment(source).await?.and_then(|d| d.spec).and_then(|s| s.replicas))
    }

    /// Waits until the reader Deployment of `source` asks for 0 replicas and no reader of it runs.
    pub async fn wait_idle_at_zero(&self, source: &str, timeout: Duration) -> Result<()> {
        poll::until(timeout, Duration::from_millis(250), || async {
            let replicas = self.reader_replicas(source).await?;
            let running = self.alive_readers(source).len();
            Ok(Check::met_if(replicas == Some(0) && running == 0, || {
                format!(
                    "{source}: not idle at zero readers (spec.replicas {replicas:?}, {running} running); logs under {}",
                    self.state_dir.display()
                )
            }))
        })
        .await
    }

    /// Waits until at least `running` reader processes of `source` run (ready or not).
    pub async fn wait_running_readers(&self, source: &str, running: usize, timeout: Duration) -> Result<()> {
        poll::until(timeout, Duration::from_millis(250), || async {
            let now = self.running_readers(source).len();
            Ok(Check::met_if(now >= running, || {
                format!(
                    "{source}: {now} of {running} reader processes running; see {}",
                    self.state_dir.display()
                )
            }))
        })
        .await
    }

    /// Waits until the reader Deployment of `source` reports at least `ready` ready replicas.
    pub async fn wait_ready_readers(&self, source: &str, ready: i32, timeout: Duration) -> Result<()> {
        poll::until(timeout, Duration::from_millis(250), || async {
            let deployment = self.reader_deployment(source).await?;
            let status = deployment.and_then(|d| d.status).unwrap_or_default();
            Ok(Check::met_if(status.ready_replicas.unwrap_or(0) >= ready, || {
                format!("{source}: fewer than {ready} ready readers; see {}", self.state_dir.display())
            }))
        })
        .await
    }

    /// The suite's pods as the kubelet last wrote them.
    pub fn pods(&self) -> Vec<PodInfo> {
        crate::kubelet::read_pods_file(&self.info.pods_file)
            .into_iter()
            .filter(|p| p.namespace == self.namespace)
            .collect()
    }

    /// Reader processes of the suite's namespace: (pod name, pid, deployment, ...).
    pub fn reader_processes(&self) -> Vec<ReaderProcess> {
        self.pods()
            .into_iter()
            .map(|p| ReaderProcess {
                admin_port: p.ports.get(&READER_ADMIN_PORT).copied(),
                name: p.name,
                deployment: p.deployment,
                pid: p.pid,
                terminating: p.terminating,
                restarts: u64::from(p.restarts),
                last_exit: p.last_exit,
                log: p.log,
            })
            .collect()
    }

    /// Running, not terminating reader processes of `source`.
    pub fn running_readers(&self, source: &str) -> Vec<ReaderProcess> {
        let deployment = format!("{source}-reader");
        self.reader_processes()
            .into_iter()
            .filter(|p| p.deployment == deployment && p.pid.is_some() && !p.terminating)
            .collect()
    }

    /// Reader processes of `source` that are alive, terminating ones included (a draining reader still
    /// delivers).
    pub fn alive_readers(&self, source: &str) -> Vec<ReaderProcess> {
        let deployment = format!("{source}-reader");
        self.reader_processes()
            .into_iter()
            .filter(|p| p.deployment == deployment && p.pid.is_some())
            .collect()
    }

    /// The log file of pod `name` (all its container's runs).
    pub fn pod_log(&self, name: &str) -> PathBuf {
        self.info.logs_dir.join(format!("{}_{name}.log", self.namespace))
    }

    /// Every pod log of the suite's namespace.
    pub fn pod_logs(&self) -> Vec<PathBuf> {
        let prefix = format!("{}_", self.namespace);
        let Ok(entries) = std::fs::read_dir(&self.info.logs_dir) else { return Vec::new() };
        entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            .collect()
    }

    /// Where logs and state live, for failure messages.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The cluster's connection details.
    pub fn cluster(&self) -> &Info {
        &self.info
    }
}

impl Drop for System {
    fn drop(&mut self) {
        for operator in self.operators.drain(..) {
            stop_process(operator.child, Signal::SIGTERM, Duration::from_secs(10));
        }
        if let Some(child) = self.private.take() {
            // SIGTERM lets the kubelet stop the readers within their grace, then the control plane.
            stop_process(child, Signal::SIGTERM, Duration::from_secs(60));
            return;
        }
        // On the shared cluster: the namespace goes, and with it every reader (the kubelet sends
        // them SIGTERM); the binding of the operator's ClusterRole is cluster-scoped, so it goes by hand.
        // The operator is stopped by now, so the sources' finalizer (its cleanup hook) is taken off
        // here: otherwise the namespace would stay Terminating for good, its objects with it.
        let client = self.client.clone();
        let namespace = self.namespace.clone();
        let cleanup = async move {
            let sources = Api::<SqsSource>::namespaced(client.clone(), &namespace);
            for source in sources.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
                let unfinalized = serde_json::json!({ "metadata": { "finalizers": null } });
                let name = kube::ResourceExt::name_any(&source);
                let _ = sources.patch(&name, &PatchParams::default(), &Patch::Merge(&unfinalized)).await;
            }
            let binding = format!("{}-{namespace}", install::operator_service_account().unwrap_or_default());
            let _ = Api::<ClusterRoleBinding>::all(client.clone())
                .delete(&binding, &DeleteParams::default())
                .await;
            let _ = Api::<Namespace>::all(client).delete(&namespace, &DeleteParams::default()).await;
        };
        // Drop may run inside or outside a runtime: run the cleanup on a thread of its own.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), cleanup).await }).ok();
            }
        })
        .join();
    }
}

/// One operator replica: its identity in the Lease and its process.
struct OperatorProcess {
    identity: String,
    child: Child,
}

/// One reader process.
#[derive(Debug, Clone)]
pub struct ReaderProcess {
    pub name: String,
    pub deployment: String,
    pub pid: Option<u32>,
    pub terminating: bool,
    pub restarts: u64,
    /// How the process's last run ended (`exit status: 0`), if it ended.
    pub last_exit: Option<String>,
    /// Its log file.
    pub log: PathBuf,
    /// The loopback port its admin server (`/metrics`, `/readyz`) listens on.
    pub admin_port: Option<u16>,
}

/// Static credentials and region for LocalStack (any credentials work there).
pub fn aws_test_env() -> [(&'static str, &'static str); 3] {
    [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")]
}

/// Starts `sluice-controlplane up` in `dir` and waits for its `cluster.json`.
async fn start_private(bin_dir: &Path, dir: &Path) -> Result<(Info, Option<Child>)> {
    std::fs::create_dir_all(dir)?;
    let _ = std::fs::remove_file(dir.join("cluster.json"));
    let log = std::fs::File::create(dir.join("sluice-controlplane.log"))?;
    let mut child = Command::new(bin_dir.join("sluice-controlplane"))
        .arg("up")
        .arg("--dir")
        .arg(dir)
        .arg("--bin-dir")
        .arg(bin_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting sluice-controlplane")?;
    let started = Instant::now();
    loop {
        if let Ok(cluster) = Cluster::attach(dir) {
            return Ok((cluster.info, Some(child)));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(dir.join("sluice-controlplane.log")).unwrap_or_default();
            bail!("sluice-controlplane exited ({status}):\n{text}");
        }
        if started.elapsed() > Duration::from_secs(300) {
            stop_process(child, Signal::SIGTERM, Duration::from_secs(10));
            bail!("the cluster did not come up in 300 s; see {}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Five random characters of the pod-name alphabet.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())])).collect()
}
