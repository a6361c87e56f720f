//! The real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, built from the pinned Go modules under tests/controlplane/go (see
//! tests/scripts/kube-binaries.sh), started as processes with a PKI of their own.
//!
//! This is what controller-runtime's envtest runs, plus the controller-manager and the scheduler, so
//! that a Deployment becomes ReplicaSets and Pods bound to a node, garbage is collected and
//! ServiceAccounts get their tokens as on any cluster. The node itself is ours: see [`crate::kubelet`].
//!
//! Each component can be stopped and started again on its own ports and data, which is how the fault
//! suites take the API server or etcd away and bring it back.

pub mod audit;
mod binaries;
mod component;
pub mod flags;
mod ports;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use nix::sys::signal::Signal;

pub use binaries::locate as binaries;
pub use component::{Component, stop_process};
use flags::{Files, Ports, Tuning};
pub use ports::free_port;

use crate::kubeconfig::{self, Credentials};
use crate::pki::{self, Identity, Pki};

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory holding kube-apiserver, kube-controller-manager, kube-scheduler and etcd.
    pub binaries: PathBuf,
    /// Where its PKI, data, kubeconfigs and logs go.
    pub dir: PathBuf,
    /// Settings the suites vary.
    pub tuning: Tuning,
    /// Install the SqsSource CRD before the controllers start. Why before: the garbage collector
    /// learns the API's kinds at its start and then every 30 s; a kind added later is unknown to
    /// it for up to that long, so children of a source deleted meanwhile would outlive it (a real
    /// cluster has its CRDs long before its sources).
    pub install_crd: bool,
}

/// A running control plane. Dropping it stops every component.
pub struct ControlPlane {
    dir: PathBuf,
    pki: Pki,
    ports: Ports,
    // Dropped in this order: the clients of etcd first.
    scheduler: Component,
    controller_manager: Component,
    apiserver: Component,
    etcd: Component,
}

/// How long a restarted API server gets to end by itself before it is killed.
pub const RESTART_GRACE: Duration = Duration::from_secs(3);

/// How long a component gets to come up before the start fails with its log.
const START_TIMEOUT: Duration = Duration::from_secs(120);

impl ControlPlane {
    /// Starts etcd, the API server, the controller-manager and the scheduler, and waits until the API
    /// server is ready and the controllers have made the `default` ServiceAccount.
    pub async fn start(config: Config) -> Result<Self> {
        let dir = std::path::absolute(&config.dir)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let pki = Pki::ensure(&dir.join("pki"))?;
        let ports = Ports {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
            controller_manager: free_port()?,
            scheduler: free_port()?,
        };
        let url = format!("https://127.0.0.1:{}", ports.apiserver);
        let kubeconfig_of = |who: Identity<'_>| -> Result<PathBuf> {
            let pair = pki.client(who)?;
            let path = dir.join(format!("{}.kubeconfig", who.file));
            kubeconfig::write(
                &path,
                &kubeconfig::render(&url, &pki.ca().cert, Credentials::Certificate(&pair), "default"),
            )?;
            Ok(path)
        };
        let files = Files {
            etcd_data: dir.join("etcd"),
            ca_cert: pki.ca().cert,
            serving_cert: pki.serving().cert,
            serving_key: pki.serving().key,
            sa_key: pki.service_account_key(),
            sa_pub: pki.service_account_pub(),
            apiserver_cert_dir: dir.join("apiserver"),
            controller_manager_kubeconfig: kubeconfig_of(pki::CONTROLLER_MANAGER)?,
            scheduler_kubeconfig: kubeconfig_of(pki::SCHEDULER)?,
        };
        kubeconfig_of(pki::ADMIN)?;
        let bin = |name: &str| config.binaries.join(name);
        let logs = dir.join("logs");
        let log = |name: &str| logs.join(format!("{name}.log"));
        let mut etcd = Component::start("etcd", &bin("etcd"), flags::etcd(ports, &files), &log("etcd"))?;
        let mut apiserver = Component::start(
            "kube-apiserver",
            &bin("kube-apiserver"),
            flags::apiserver(ports, &files, &config.tuning),
            &log("kube-apiserver"),
        )?;
        // The controllers authenticate against RBAC's bootstrap roles: start them once those exist.
        wait_ready(
            &mut etcd,
            &mut apiserver,
            &dir.join(format!("{}.kubeconfig", pki::ADMIN.file)),
            START_TIMEOUT,
        )
        .await?;
        if config.install_crd {
            let admin = kubeconfig::client(&dir.join(format!("{}.kubeconfig", pki::ADMIN.file))).await?;
            crate::install::crd(&admin).await?;
        }
        let mut plane = Self {
            dir,
            pki,
            ports,
            scheduler: Component::start(
                "kube-scheduler",
                &bin("kube-scheduler"),
                flags::scheduler(ports, &files),
                &log("kube-scheduler"),
            )?,
            controller_manager: Component::start(
                "kube-controller-manager",
                &bin("kube-controller-manager"),
                flags::controller_manager(ports, &files),
                &log("kube-controller-manager"),
            )?,
            apiserver,
            etcd,
        };
        plane.wait_controllers(START_TIMEOUT).await?;
        Ok(plane)
    }

    /// The API server's URL (`https://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// The directory of its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA clients trust.
    pub fn ca_cert(&self) -> PathBuf {
        self.pki.ca().cert
    }

    /// The PKI, to issue client certificates (the node's).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The administrator's kubeconfig (`system:masters`): what a cluster's creator holds. Only the
    /// harness uses it, to install what a user installs; the operator and the readers never do.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join(format!("{}.kubeconfig", pki::ADMIN.file))
    }

    /// A client as the administrator.
    pub async fn admin_client(&self) -> Result<kube::Client> {
        kubeconfig::client(&self.admin_kubeconfig()).await
    }

    /// A kubeconfig authenticating as `who` with a client certificate, written once.
    pub fn kubeconfig_for(&self, who: Identity<'_>) -> Result<PathBuf> {
        let pair = self.pki.client(who)?;
        let path = self.dir.join(format!("{}.kubeconfig", who.file));
        let text =
            kubeconfig::render(&self.url(), &self.ca_cert(), Credentials::Certificate(&pair), "default");
        kubeconfig::write(&path, &text)?;
        Ok(path)
    }

    /// The API server, to stop, restart or read the log of.
    pub fn apiserver(&mut self) -> &mut Component {
        &mut self.apiserver
    }

    /// etcd, likewise.
    pub fn etcd(&mut self) -> &mut Component {
        &mut self.etcd
    }

    /// The controller-manager, likewise.
    pub fn controller_manager(&mut self) -> &mut Component {
        &mut self.controller_manager
    }

    /// Stops the API server (SIGTERM: the graceful shutdown an upgrade does) and starts it again on
    /// the same port, returning once it is ready.
    ///
    /// Why SIGKILL after [`RESTART_GRACE`]: kube-apiserver's graceful shutdown stops listening at
    /// once, then waits for the requests it holds (the clients' watches among them) for up to
    /// its request timeout; a restart would be a 30-60 s outage, which the outage suites show
    /// on their own.
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        self.apiserver.stop(Signal::SIGTERM, RESTART_GRACE);
        self.apiserver.resume()?;
        self.wait_ready(START_TIMEOUT).await
    }

    /// Waits until the API server answers `/readyz` (every post-start hook done: RBAC's bootstrap
    /// roles, priority-and-fairness's configuration, the CRD informers).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let admin = self.admin_kubeconfig();
        wait_ready(&mut self.etcd, &mut self.apiserver, &admin, timeout).await
    }

    /// Waits until the controller-manager's ServiceAccount controller made `default/default`: the
    /// controllers run, and pods of the namespace can be admitted.
    async fn wait_controllers(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let api: Api<ServiceAccount> = Api::namespaced(self.admin_client().await?, "default");
        loop {
            if let Some(exit) = self.controller_manager.exited() {
                bail!(
                    "kube-controller-manager exited ({exit}); its log ends:\n{}",
                    self.controller_manager.tail(20)
                );
            }
            if let Some(exit) = self.scheduler.exited() {
                bail!("kube-scheduler exited ({exit}); its log ends:\n{}", self.scheduler.tail(20));
            }
            if api.get_opt("default").await.context("reading default/default")?.is_some() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!(
                    "kube-controller-manager made no ServiceAccount in {} s; its log ends:\n{}",
                    timeout.as_secs(),
                    self.controller_manager.tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Waits until the API server answers `/readyz`, failing early with the log of a component that exited.
async fn wait_ready(
    etcd: &mut Component,
    apiserver: &mut Component,
    admin: &Path,
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    let mut last;
    loop {
        for component in [&mut *etcd, &mut *apiserver] {
            if let Some(exit) = component.exited() {
                bail!(
                    "{} exited ({exit}) while starting; its log ends:\n{}",
                    component.name(),
                    component.tail(20)
                );
            }
        }
        match readyz(admin).await {
            Ok(()) => return Ok(()),
            Err(error) => last = format!("{error:#}"),
        }
        if start.elapsed() > timeout {
            bail!(
                "kube-apiserver was not ready after {} s ({last}); its log ends:\n{}",
                timeout.as_secs(),
                apiserver.tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn readyz(admin: &Path) -> Result<()> {
    let client = kubeconfig::client(admin).await?;
    let request = http::Request::get("/readyz").body(Vec::new())?;
    let text = client.request_text(request).await?;
    if text.trim() != "ok" {
        bail!("/readyz said {text}");
    }
    Ok(())
}
