//! `sluice-localcp`: the local control plane (and optionally the process runner) as a process.
//!
//! The demo and the multi-process end-to-end suite need a Kubernetes API that the operator and kubectl
//! reach through a kubeconfig, and readers started per Deployment replica; this binary wires
//! [`sluice_localcp::controlplane`] and [`sluice_localcp::kubelet`] together and runs until SIGTERM/SIGINT,
//! then stops every reader within its grace period.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Parser;
use sluice_localcp::controlplane::{self, ControlPlane};
use sluice_localcp::kubelet::{self, Kubelet};
use tokio::signal::unix::{SignalKind, signal};

/// Local Kubernetes control plane for Sluice tests and demos (plain HTTP, loopback only; no token
/// means the administrator, pods get ServiceAccount tokens).
#[derive(Debug, Parser)]
#[command(name = "sluice-localcp")]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write a kubeconfig pointing at the server here.
    #[arg(long, env = "KUBECONFIG_OUT")]
    kubeconfig: Option<PathBuf>,
    /// Write the server URL to this file once listening.
    #[arg(long)]
    url_file: Option<PathBuf>,
    /// Run Deployment replicas as local processes.
    #[arg(long)]
    kubelet: bool,
    /// Where the process runner finds binaries by basename (e.g. target/debug).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Process runner state: logs/<pod>.log, pods/<pod>/ (ConfigMap files), pods.json.
    #[arg(long, default_value = ".sluice/localcp")]
    state_dir: PathBuf,
    /// Only run Deployments of this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Do not mirror processes as Pod objects.
    #[arg(long)]
    no_pod_objects: bool,
    /// Watch events kept before older resourceVersions answer 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 10)]
    bookmark_seconds: u64,
    /// Do not validate SqsSource objects with the Sluice validator.
    #[arg(long)]
    no_validation: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = controlplane::Config {
        addr: SocketAddr::from(([127, 0, 0, 1], args.port)),
        history: args.history,
        bookmark_interval: Duration::from_secs(args.bookmark_seconds.max(1)),
        pod_log_dir: args.kubelet.then(|| kubelet::Config::in_dir(&args.state_dir).log_dir),
    };
    let cp = ControlPlane::start(config).await.context("starting the control plane")?;
    if !args.no_validation {
        controlplane::sluice::register_validators(&cp);
    }
    if let Some(path) = &args.kubeconfig {
        cp.write_kubeconfig(path).with_context(|| format!("writing the kubeconfig {}", path.display()))?;
    }
    if let Some(path) = &args.url_file {
        std::fs::write(path, cp.url()).with_context(|| format!("writing {}", path.display()))?;
    }
    let runner = if args.kubelet {
        let mut cfg = kubelet::Config::in_dir(&args.state_dir);
        cfg.bin_dir = args.bin_dir.clone();
        cfg.namespace = args.namespace.clone();
        cfg.pod_objects = !args.no_pod_objects;
        cfg.api_url = Some(cp.url());
        Some(Kubelet::start(cp.client()?, cfg).context("starting the process runner")?)
    } else {
        None
    };
    println!("sluice-localcp listening on {}", cp.url());

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    if let Some(k) = runner {
        k.shutdown().await;
    }
    cp.shutdown().await.context("stopping the control plane")?;
    Ok(())
}
