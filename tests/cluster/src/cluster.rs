//! A whole test cluster: the real control plane, one process-kubelet node, and what every user
//! installs before the operator (the CRD and the reader policy from deploy/).
//!
//! One cluster serves a whole test run, as envtest users share one per suite: starting the API server
//! costs seconds, a namespace per test costs milliseconds. `sluice-controlplane up` runs one and
//! writes `cluster.json` into its directory; a suite finds it through `SLUICE_CLUSTER` (that
//! directory) and [`Cluster::attach`]es. A suite that takes the control plane itself down (the fault
//! suites) or runs without the test command starts a private one with [`Cluster::start`].

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::controlplane::{self, ControlPlane, flags::Tuning};
use crate::install;
use crate::kubeconfig;
use crate::kubelet::{self, Kubelet};
use crate::pki::Identity;

/// The node's name.
pub const NODE: &str = "sluice-node";

/// What another process needs to use a running cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Info {
    /// The API server's URL.
    pub url: String,
    /// The CA clients trust.
    pub ca: PathBuf,
    /// The administrator's kubeconfig (the harness's; never the operator's or a reader's).
    pub admin_kubeconfig: PathBuf,
    /// Where the kubelet writes its pod list.
    pub pods_file: PathBuf,
    /// Where the kubelet writes pod logs.
    pub logs_dir: PathBuf,
    /// Kubernetes version of the API server.
    pub version: String,
}

/// How to start a cluster.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Kubernetes minor (`1.34`); `None`: the newest pinned.
    pub minor: Option<String>,
    /// Where the pods' programs are (`target/debug`).
    pub bin_dir: Option<PathBuf>,
    /// Env every pod starts with (the node's settings).
    pub pod_env: Vec<(String, String)>,
    /// Settings of the control plane.
    pub tuning: Tuning,
    /// Install nothing of Sluice's (no CRD, no reader policy): the suite installs them itself, as
    /// `helm install` does.
    pub bare: bool,
}

/// A cluster this process runs (or one it attached to, when `plane` is `None`).
pub struct Cluster {
    pub info: Info,
    plane: Option<ControlPlane>,
    kubelet: Option<Kubelet>,
}

impl Cluster {
    /// Starts a cluster in `dir`, installs the CRD and the reader policy, and returns once a pod can
    /// be scheduled on its node.
    pub async fn start(dir: &Path, options: Options) -> Result<Self> {
        let binaries = controlplane::binaries(options.minor.as_deref())?;
        let plane = ControlPlane::start(controlplane::Config {
            binaries,
            dir: dir.join("controlplane"),
            tuning: options.tuning.clone(),
            install_crd: !options.bare,
        })
        .await?;
        let admin = plane.admin_client().await?;
        let version = admin.apiserver_version().await?.git_version;
        let node_user = format!("system:node:{NODE}");
        let node_kubeconfig =
            plane.kubeconfig_for(Identity { file: "node", user: &node_user, groups: &["system:nodes"] })?;
        let kubelet_dir = std::path::absolute(dir.join("kubelet"))?;
        let mut config = kubelet::Config::in_dir(&kubelet_dir, NODE, &plane.url(), &plane.ca_cert());
        config.bin_dir = options.bin_dir.clone();
        config.pod_env = options.pod_env.clone();
        let node_client = kubeconfig::client(&node_kubeconfig).await?;
        let kubelet =
            Kubelet::start(node_client, config.clone()).await.context("starting the process kubelet")?;
        if !options.bare {
            install::reader_policy(&admin).await?;
        }
        let info = Info {
            url: plane.url(),
            ca: plane.ca_cert(),
            admin_kubeconfig: plane.admin_kubeconfig(),
            pods_file: config.pods_file.clone().unwrap_or_default(),
            logs_dir: kubelet_dir.join("logs"),
            version,
        };
        Ok(Self { info, plane: Some(plane), kubelet: Some(kubelet) })
    }

    /// Uses the cluster whose `cluster.json` is in `dir`.
    pub fn attach(dir: &Path) -> Result<Self> {
        let path = dir.join("cluster.json");
        let text = std::fs::read(&path)
            .with_context(|| format!("reading {} (is sluice-controlplane up running?)", path.display()))?;
        Ok(Self { info: serde_json::from_slice(&text)?, plane: None, kubelet: None })
    }

    /// Writes `cluster.json` into `dir`, for [`Self::attach`].
    pub fn publish(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join("cluster.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&self.info)?)?;
        std::fs::rename(tmp, dir.join("cluster.json"))?;
        Ok(())
    }

    /// A client as the administrator.
    pub async fn admin_client(&self) -> Result<kube::Client> {
        kubeconfig::client(&self.info.admin_kubeconfig).await
    }

    /// The control plane, when this process runs it (to stop or restart components).
    pub fn control_plane(&mut self) -> Option<&mut ControlPlane> {
        self.plane.as_mut()
    }

    /// The pods the node runs, as it last wrote them.
    pub fn pods(&self) -> Vec<kubelet::PodInfo> {
        match &self.kubelet {
            Some(k) => k.pods(),
            None => kubelet::read_pods_file(&self.info.pods_file),
        }
    }

    /// Stops the node (every pod within its grace period), then the control plane.
    pub async fn shutdown(mut self) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.shutdown().await;
        }
        drop(self.plane.take());
    }
}
