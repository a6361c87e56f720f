//! The oldest Kubernetes minor Sluice supports, live: a cluster of 1.34 (the oldest release the
//! control plane's Go modules pin, tests/controlplane/go/kube-1.34), with the CRD, the reader policy
//! and the operator's RBAC installed as shipped, the operator running with its ServiceAccount token,
//! and one source delivering a few hundred messages through a reader pod. Every other suite runs on
//! the newest pinned minor; the minors between are checked by schema only (scripts/check-manifests.sh).

use std::time::Duration;

use anyhow::Result;
use sluice_tests::cluster::{Cluster, Options};
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, aws_test_env, bin_dir};

const OLDEST: &str = "1.34";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_manifests_and_a_source_work_on_the_oldest_supported_kubernetes() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "oldest-k8s", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("oldest-kubernetes");
    let _ = std::fs::remove_dir_all(&dir);
    let pod_env = aws_test_env().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let options =
        Options { minor: Some(OLDEST.to_owned()), bin_dir: Some(bin_dir()), pod_env, ..Options::default() };
    let cluster = Cluster::start(&dir.join("cluster"), options).await?;
    println!("cluster: Kubernetes {} (CRD and reader policy installed as shipped)", cluster.info.version);
    assert!(cluster.info.version.starts_with(&format!("v{OLDEST}.")), "{}", cluster.info.version);

    let mut system = System::start_on(&bin_dir(), &dir.join("system"), cluster.info.clone(), None).await?;
    system.start_operator()?;
    let yaml = SourceYaml::bare("oldest", &queue.url, &endpoint)
        .sink("web", Sink::http(&sink.url()))
        .replicas(1, 1)
        .yaml();
    system.apply_source(&yaml).await?;
    system.wait_ready_readers("oldest", 1, Duration::from_secs(120)).await?;
    queue.send_batch(300).await?;
    let stats = sink.wait_for_distinct(300, Duration::from_secs(120)).await?;
    println!(
        "Kubernetes {}: 300 sent, {} delivered, {} duplicates",
        cluster.info.version, stats.distinct, stats.duplicates
    );
    assert!(stats.distinct >= 300);

    drop(system);
    cluster.shutdown().await;
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
