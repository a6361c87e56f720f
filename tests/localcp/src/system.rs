//! The whole system on one machine, as separate processes: the local control plane with its process
//! runner (`sluice-localcp --kubelet`), the operator (`sluice-operator`), and the reader processes the
//! runner starts for each Deployment replica.
//!
//! Why processes and not tasks: the end-to-end suite must prove that the binaries work together through
//! a Kubernetes API under faults (SIGKILL, restarts, rollouts), which only separate processes show. The
//! demo drives the same harness, so what users see is what the suite tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_crds::SqsSource;

use crate::poll::{self, Check};

/// Field manager of what the harness applies (the user's `kubectl apply`).
const MANAGER: &str = "sluice-e2e";

/// A running local system. Dropping it stops every process it started (readers included: the control
/// plane's runner stops them on SIGTERM).
pub struct System {
    bin_dir: PathBuf,
    state_dir: PathBuf,
    kubeconfig: PathBuf,
    localcp: Option<Child>,
    operator: Option<Child>,
    operator_starts: u32,
    /// A client of the local control plane.
    pub client: kube::Client,
    /// Namespace the scenarios use.
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

    /// Starts the control plane and its process runner, and installs the CRD and the reader
    /// policy. `bin_dir` holds
    /// `sluice-localcp`, `sluice-operator` and `sluice-reader` (e.g. `target/debug`); `state_dir` gets
    /// the kubeconfig, the pod logs and the operator log.
    pub async fn start(bin_dir: &Path, state_dir: &Path) -> Result<Self> {
        for bin in ["sluice-localcp", "sluice-operator", "sluice-reader"] {
            if !bin_dir.join(bin).is_file() {
                bail!(
                    "{} is missing: build the binaries first with `cargo build --workspace --bins`",
                    bin_dir.join(bin).display()
                );
            }
        }
        std::fs::create_dir_all(state_dir)?;
        let kubeconfig = state_dir.join("kubeconfig");
        let url_file = state_dir.join("url");
        let _ = std::fs::remove_file(&url_file);
        let log = std::fs::File::create(state_dir.join("localcp.log"))?;
        let localcp = Command::new(bin_dir.join("sluice-localcp"))
            .args(["--port", "0", "--kubelet"])
            .arg("--bin-dir")
            .arg(bin_dir)
            .arg("--state-dir")
            .arg(state_dir.join("localcp"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--url-file")
            .arg(&url_file)
            // Inherited by every reader process: how they reach the API and LocalStack.
            .env("KUBECONFIG", &kubeconfig)
            .envs(aws_test_env())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting sluice-localcp")?;
        let mut system = Self {
            bin_dir: bin_dir.to_owned(),
            state_dir: state_dir.to_owned(),
            kubeconfig: kubeconfig.clone(),
            localcp: Some(localcp),
            operator: None,
            operator_starts: 0,
            client: placeholder_client()?,
            namespace: "default".into(),
        };
        wait_for_file(&url_file, Duration::from_secs(30)).await.context("sluice-localcp did not come up")?;
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        system.client = kube::Client::try_from(config)?;
        system.install_crd().await?;
        // As `kubectl apply -k deploy/kustomize/` installs it with the operator: readers may write
        // only their own leases, which the control plane enforces for the tokens its runner mounts.
        crate::controlplane::sluice::install_reader_policy(&system.client).await?;
        Ok(system)
    }

    /// Applies the committed CRD, as `kubectl apply -f deploy/crds/sqssource.yaml` would.
    async fn install_crd(&self) -> Result<()> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/sqssource.yaml");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd)).await?;
        Ok(())
    }

    /// Starts (or restarts) the operator process. Its log goes to `operator-N.log` in the state dir.
    pub fn start_operator(&mut self) -> Result<()> {
        if self.operator.is_some() {
            bail!("the operator is already running");
        }
        self.operator_starts += 1;
        let log =
            std::fs::File::create(self.state_dir.join(format!("operator-{}.log", self.operator_starts)))?;
        let child = Command::new(self.bin_dir.join("sluice-operator"))
            .args(["--admin-addr", "127.0.0.1:0", "--reader-image", "sluice:local"])
            .args(["--leader-election", "on", "--lease-namespace", "default"])
            .arg("--identity")
            .arg(format!("operator-{}", self.operator_starts))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info")
            .envs(aws_test_env())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting sluice-operator")?;
        self.operator = Some(child);
        Ok(())
    }

    /// Stops the operator with `signal` (SIGTERM: graceful; SIGKILL: a crash) and waits for it.
    pub fn stop_operator(&mut self, signal: Signal) -> Result<()> {
        if let Some(child) = self.operator.take() {
            stop_child(child, signal, Duration::from_secs(15));
        }
        Ok(())
    }

    /// Applies an SqsSource manifest (YAML) in [`Self::namespace`].
    pub async fn apply_source(&self, yaml: &str) -> Result<SqsSource> {
        let source: SqsSource = serde_yaml::from_str(yaml).context("parsing the SqsSource manifest")?;
        let name = source.metadata.name.clone().context("the SqsSource needs metadata.name")?;
        let api: Api<SqsSource> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&source)).await?)
    }

    /// Deletes an SqsSource; garbage collection removes its children, the runner its processes.
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
            let running = self.running_readers(source).len();
            Ok(Check::met_if(replicas == Some(0) && running == 0, || {
                format!(
                    "{source}: not idle at zero readers (spec.replicas {replicas:?}, {running} running); logs under {}",
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

    /// Reader processes as the runner last wrote them (`pods.json`): (pod name, pid, deployment).
    pub fn reader_processes(&self) -> Vec<ReaderProcess> {
        let path = self.state_dir.join("localcp/pods.json");
        let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
        let Ok(serde_json::Value::Array(pods)) = serde_json::from_str(&text) else { return Vec::new() };
        pods.iter()
            .filter_map(|p| {
                Some(ReaderProcess {
                    name: p.get("name")?.as_str()?.to_owned(),
                    deployment: p.get("deployment")?.as_str()?.to_owned(),
                    pid: p.get("pid").and_then(serde_json::Value::as_u64).map(|v| v as u32),
                    terminating: p.get("terminating").and_then(serde_json::Value::as_bool).unwrap_or(false),
                    restarts: p.get("restarts").and_then(serde_json::Value::as_u64).unwrap_or(0),
                    last_exit: p.get("last_exit").and_then(serde_json::Value::as_str).map(str::to_owned),
                })
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

    /// Where logs and state live, for failure messages.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
}

impl Drop for System {
    fn drop(&mut self) {
        if let Some(child) = self.operator.take() {
            stop_child(child, Signal::SIGTERM, Duration::from_secs(10));
        }
        // SIGTERM lets the runner stop its readers (SIGTERM, then SIGKILL after their grace period).
        if let Some(child) = self.localcp.take() {
            stop_child(child, Signal::SIGTERM, Duration::from_secs(40));
        }
    }
}

/// One reader process.
#[derive(Debug, Clone)]
pub struct ReaderProcess {
    pub name: String,
    pub deployment: String,
    pub pid: Option<u32>,
    pub terminating: bool,
    pub restarts: u64,
    /// How the process's last run ended, as the runner wrote it (`exit status: 0`), if it ended.
    pub last_exit: Option<String>,
}

/// Static credentials and region for LocalStack (any credentials work there).
pub fn aws_test_env() -> [(&'static str, &'static str); 3] {
    [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")]
}

/// Sends `signal` to a process we started and waits up to `grace`, then SIGKILLs it.
fn stop_child(mut child: Child, signal: Signal, grace: Duration) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, signal);
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn wait_for_file(path: &Path, timeout: Duration) -> Result<()> {
    poll::until(timeout, Duration::from_millis(50), || async {
        let written = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0);
        Ok(Check::met_if(written, || format!("{} did not appear", path.display())))
    })
    .await
}

/// A client that is replaced before use; building the real one needs the control plane's URL first.
fn placeholder_client() -> Result<kube::Client> {
    let config = kube::Config::new("http://127.0.0.1:9".parse()?);
    Ok(kube::Client::try_from(config)?)
}
