//! `sluice-controlplane up`: runs a test cluster (the real control plane and one process-kubelet
//! node, with the CRD and the reader policy installed) until SIGTERM or Ctrl-C, then stops the pods
//! within their grace periods and the control plane. The test command and the demo run one; suites
//! attach to it through `SLUICE_CLUSTER` (the `--dir` given here). kubectl works against it with
//! `KUBECONFIG=<dir>/controlplane/admin.kubeconfig`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use sluice_cluster::cluster::{Cluster, Options};
use sluice_cluster::install;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(
    name = "sluice-controlplane",
    about = "A local Kubernetes test cluster: real control plane, process kubelet"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the cluster and run until SIGTERM or Ctrl-C.
    Up {
        /// Directory for its PKI, data, kubeconfigs, pod logs and `cluster.json`.
        #[arg(long)]
        dir: PathBuf,
        /// Where the pods' programs are (sluice-reader, sluice-operator): default, beside this binary.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Kubernetes minor to run (`1.34`); default the newest pinned.
        #[arg(long)]
        minor: Option<String>,
        /// `NAME=VALUE` every pod's environment starts with (the node's settings); repeatable. The
        /// default gives LocalStack's region and credentials.
        #[arg(long = "pod-env")]
        pod_env: Vec<String>,
    },
    /// Install the operator's shipped identity and RBAC (deploy/operator) for serving `--namespace`,
    /// and write a kubeconfig with its ServiceAccount's token: how an operator outside a pod runs with
    /// exactly the permissions it ships with.
    OperatorKubeconfig {
        /// The running cluster's directory (as given to `up`).
        #[arg(long)]
        dir: PathBuf,
        /// The namespace the operator serves and holds its Lease in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Where to write the kubeconfig (the token goes beside it).
        #[arg(long)]
        out: PathBuf,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // kube's client logs every refused request at ERROR; while the API server starts, each /readyz
    // poll is one, and the harness reports what matters itself.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=off"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .with_env_filter(filter)
        .init();
    match run(Cli::parse().command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice-controlplane: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Cmd) -> Result<()> {
    match command {
        Cmd::Up { dir, bin_dir, minor, pod_env } => up(dir, bin_dir, minor, pod_env).await,
        Cmd::OperatorKubeconfig { dir, namespace, out } => {
            let cluster = Cluster::attach(&dir)?;
            let admin = cluster.admin_client().await?;
            install::operator_rbac(&admin, &namespace).await?;
            let operator = install::operator_service_account()?;
            let info = &cluster.info;
            install::account_kubeconfig(&admin, &info.url, &info.ca, &namespace, &operator, &out).await?;
            println!("{}", out.display());
            Ok(())
        }
    }
}

async fn up(
    dir: PathBuf,
    bin_dir: Option<PathBuf>,
    minor: Option<String>,
    pod_env: Vec<String>,
) -> Result<()> {
    let bin_dir = bin_dir.or_else(|| std::env::current_exe().ok()?.parent().map(PathBuf::from));
    let pod_env = if pod_env.is_empty() {
        sluice_cluster::system::aws_test_env()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    } else {
        pod_env
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect()
    };
    std::fs::create_dir_all(&dir)?;
    let started = std::time::Instant::now();
    let cluster = Cluster::start(&dir, Options { minor, bin_dir, pod_env, ..Options::default() }).await?;
    cluster.publish(&dir)?;
    tracing::info!(
        url = %cluster.info.url,
        version = %cluster.info.version,
        seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
        "cluster ready; KUBECONFIG={}",
        cluster.info.admin_kubeconfig.display()
    );
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let _ = std::fs::remove_file(dir.join("cluster.json"));
    cluster.shutdown().await;
    Ok(())
}
