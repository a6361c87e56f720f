//! The Helm chart installed the way a platform team installs it, on a real API server: `helm install`
//! of deploy/helm/sluice (CRD, RBAC, the operator Deployment, the reader policy) into a cluster with
//! nothing of Sluice's in it; the operator runs as the chart's pod (the process kubelet maps the image
//! to the binaries just built) with the chart's ServiceAccount and RBAC alone; an SqsSource delivers;
//! `helm upgrade` of a value rolls the operator; deleting the source and `helm uninstall` leave no
//! reader behind (the CRD stays, as the chart documents: `crds.keep`).
//!
//! A private cluster: the chart's cluster-scoped objects (ClusterRole, policy, CRD) have fixed names
//! that the shared cluster's suites install with another field manager, which helm would refuse to
//! adopt.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use sluice_tests::cluster::{Cluster, Options};
use sluice_tests::kubeconfig;
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{aws_test_env, bin_dir};

const RELEASE: &str = "sluice";
const NAMESPACE: &str = "sluice-system";

fn helm_binary() -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/helm.sh");
    let out = Command::new("bash").arg(&script).output().context("running tests/scripts/helm.sh")?;
    if !out.status.success() {
        bail!("tests/scripts/helm.sh failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Runs helm with the cluster's admin kubeconfig; its stdout, or the error with its stderr.
fn helm(bin: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(bin).env("KUBECONFIG", kubeconfig).args(args).output().context("running helm")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("$ helm {}\n{stdout}{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("helm {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(stdout)
}

/// The running, ready operator pods of the release, by name.
fn operator_pods(cluster: &Cluster) -> Vec<String> {
    cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.namespace == NAMESPACE
                && p.deployment == "sluice-operator"
                && p.pid.is_some()
                && p.ready
                && !p.terminating
        })
        .map(|p| p.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_and_uninstall_on_a_real_api_server() -> Result<()> {
    let helm_bin = helm_binary()?;
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "helm", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-install");
    let _ = std::fs::remove_dir_all(&dir);
    let pod_env = aws_test_env().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let options = Options { bin_dir: Some(bin_dir()), pod_env, bare: true, ..Options::default() };
    let cluster = Cluster::start(&dir.join("cluster"), options).await?;
    let admin = &cluster.info.admin_kubeconfig;
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/sluice");
    let chart = chart.to_str().unwrap_or_default();

    // One replica: leader election is tested elsewhere. A metrics port named explicitly: the chart
    // then passes it in SLUICE_ADMIN_ADDR, which the process kubelet can move to a loopback port of
    // the pod's own (the operator's built-in default it cannot see).
    helm(
        &helm_bin,
        admin,
        &[
            "install",
            RELEASE,
            chart,
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "replicaCount=1",
            "--set",
            "metrics.port=9464",
            "--wait",
            "--timeout",
            "180s",
        ],
    )?;
    let first = poll::until(Duration::from_secs(120), Duration::from_millis(250), || async {
        let pods = operator_pods(&cluster);
        Ok(if pods.len() == 1 {
            Check::Met(pods[0].clone())
        } else {
            Check::NotYet(format!("operator pods ready: {pods:?}"))
        })
    })
    .await?;
    println!("operator pod from the chart: {first}");

    // A source in another namespace, served by the chart's operator with the chart's RBAC.
    let client = kubeconfig::client_in(admin, "default").await?;
    let yaml = SourceYaml::bare("orders", &queue.url, &endpoint)
        .sink("web", Sink::http(&sink.url()))
        .replicas(1, 1)
        .yaml();
    let source_file = dir.join("source.yaml");
    std::fs::write(&source_file, &yaml)?;
    let kubectl = |args: &[&str]| -> Result<String> {
        let out = Command::new("kubectl").env("KUBECONFIG", admin).args(args).output()?;
        if !out.status.success() {
            bail!("kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    kubectl(&["apply", "--server-side", "-n", "default", "-f", source_file.to_str().unwrap_or_default()])?;
    queue.send_batch(300).await?;
    let stats = sink
        .wait_for_distinct(300, Duration::from_secs(180))
        .await
        .with_context(|| format!("logs under {}", dir.display()))?;
    println!("through the chart's operator: 300 sent, {} delivered", stats.distinct);

    // helm upgrade of a value: the template changes, the Deployment controller rolls the operator.
    helm(
        &helm_bin,
        admin,
        &[
            "upgrade",
            RELEASE,
            chart,
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "logging.level=debug",
            "--wait",
            "--timeout",
            "180s",
        ],
    )?;
    let second = poll::until(Duration::from_secs(120), Duration::from_millis(250), || async {
        let pods = operator_pods(&cluster);
        Ok(if pods.len() == 1 && pods[0] != first {
            Check::Met(pods[0].clone())
        } else {
            Check::NotYet(format!("operator pods after the upgrade: {pods:?} (first {first})"))
        })
    })
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let operator = deployments.get("sluice-operator").await?;
    let env = operator
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(env.iter().any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug")), "{env:?}");
    println!("helm upgrade rolled the operator: {first} -> {second}");
    queue.send_batch(100).await?;
    sink.wait_for_distinct(400, Duration::from_secs(120)).await?;

    // Delete the source (the operator removes its finalizer), then uninstall: nothing of it runs.
    kubectl(&["delete", "sqss", "orders", "-n", "default", "--wait=true", "--timeout=120s"])?;
    helm(&helm_bin, admin, &["uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s"])?;
    poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let running: Vec<String> = cluster
            .pods()
            .into_iter()
            .filter(|p| p.pid.is_some())
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        let readers = Api::<Deployment>::namespaced(client.clone(), "default")
            .list(&Default::default())
            .await?
            .items
            .len();
        Ok(Check::met_if(running.is_empty() && readers == 0, || {
            format!("after uninstall: pods running {running:?}, reader Deployments {readers}")
        }))
    })
    .await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt("sqssources.sluice.dev").await?.is_some(), "the CRD is kept (crds.keep)");
    println!("helm uninstall: no operator, no reader pod, no reader Deployment; the CRD kept");

    cluster.shutdown().await;
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
