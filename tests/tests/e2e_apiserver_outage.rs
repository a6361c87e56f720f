//! The API server goes away for 30 s under a running at-least-once source (what an EKS control-plane
//! upgrade does to a tenant): the readers' data path needs no API call, so they keep delivering while
//! it is gone; nothing is lost; no reader is restarted for the outage; and once the API server is back
//! the operator and the readers pick up where they were within seconds. The figures are printed.
//!
//! A private cluster: the suite stops the API server, which the shared cluster's other suites need.

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;
use sluice_tests::cluster::{Cluster, Options};
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, aws_test_env, bin_dir};

const SOURCE: &str = "upgrade";
const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_readers_deliver_through_an_api_server_outage_and_lose_nothing() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "apiserver-outage", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-apiserver-outage");
    let _ = std::fs::remove_dir_all(&dir);
    let pod_env = aws_test_env().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let options = Options { bin_dir: Some(bin_dir()), pod_env, ..Options::default() };
    let mut cluster = Cluster::start(&dir.join("cluster"), options).await?;
    let mut system = System::start_on(&bin_dir(), &dir.join("system"), cluster.info.clone(), None).await?;
    system.start_operator()?;
    let yaml = SourceYaml::bare(SOURCE, &queue.url, &endpoint)
        .sink("web", Sink::http(&sink.url()))
        .replicas(3, 3)
        .yaml();
    system.apply_source(&yaml).await?;
    system.wait_ready_readers(SOURCE, 3, Duration::from_secs(120)).await?;
    let readers: Vec<String> = system.running_readers(SOURCE).into_iter().map(|r| r.name).collect();

    queue.send_batch(1000).await?;
    sink.wait_for_distinct(200, Duration::from_secs(60)).await?;

    // The API server stops as an upgrade stops it (SIGTERM, graceful), and stays away.
    let plane = cluster.control_plane().expect("a private cluster runs its control plane");
    plane.apiserver().stop(Signal::SIGTERM, Duration::from_secs(30));
    let stopped = Instant::now();
    let at_stop = sink.stats().distinct;
    queue.send_batch(2000).await?;
    tokio::time::sleep(OUTAGE.saturating_sub(stopped.elapsed())).await;
    let during = sink.stats().distinct - at_stop;
    println!(
        "API server away for {:.1} s: {during} messages delivered meanwhile",
        stopped.elapsed().as_secs_f64()
    );
    assert!(during > 0, "the readers delivered nothing while the API server was away");

    let back = Instant::now();
    plane.apiserver().resume()?;
    plane.wait_ready(Duration::from_secs(120)).await?;
    println!("API server ready again {:.1} s after its start", back.elapsed().as_secs_f64());
    let stats = sink.wait_for_distinct(3000, Duration::from_secs(120)).await?;
    println!("3000 sent: {} delivered, {} duplicates", stats.distinct, stats.duplicates);
    assert!(stats.distinct >= 3000, "lost messages: {} of 3000", stats.distinct);

    // The same reader processes, none restarted for the outage.
    let after = system.running_readers(SOURCE);
    let same: Vec<&str> =
        after.iter().filter(|r| readers.contains(&r.name)).map(|r| r.name.as_str()).collect();
    let restarts: u64 = after.iter().map(|r| r.restarts).sum();
    println!(
        "readers before {readers:?}, after {:?}, container restarts {restarts}",
        after.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    assert_eq!((same.len(), restarts), (3, 0), "the outage itself restarted or replaced readers");

    // What a person reads: WARN lines from the operator and the readers while the API was away.
    let operator_log = std::fs::read_to_string(system.state_dir().join("operator-1.log"))?;
    let operator_warns: Vec<&str> = operator_log.lines().filter(|l| l.contains(" WARN ")).collect();
    let reader_warns: Vec<String> = system
        .pod_logs()
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| t.lines().filter(|l| l.contains("\"WARN\"")).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    println!("WARN lines: operator {}, readers {}; first of each:", operator_warns.len(), reader_warns.len());
    println!("  {}", operator_warns.first().unwrap_or(&""));
    println!("  {}", reader_warns.first().map_or("", String::as_str));
    assert!(!operator_warns.is_empty() && !reader_warns.is_empty(), "an outage must be said in WARN lines");

    // An operator that could not renew its leader Lease for its duration exits (a standby may lead
    // now); in a pod its kubelet starts it again, here the harness does.
    if let Some(exit) = system.operator_exit() {
        println!(
            "the operator exited during the outage ({exit}): lost its Lease; started again as a pod would be"
        );
        system.start_operator()?;
    }
    // The operator reads the queue and writes status again within seconds.
    let back_at = k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::from_secs(back.elapsed().as_secs() as i64);
    poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let source =
            kube::Api::<sluice_crds::SqsSource>::namespaced(system.client.clone(), &system.namespace)
                .get(SOURCE)
                .await?;
        let observed = source
            .status
            .as_ref()
            .and_then(|s| s.queue.as_ref())
            .and_then(|q| q.observed_at.clone())
            .unwrap_or_default();
        let fresh = observed.parse::<k8s_openapi::jiff::Timestamp>().is_ok_and(|t| t > back_at);
        Ok(Check::met_if(fresh, || {
            format!("status.queue.observedAt {observed} is from before the API server came back")
        }))
    })
    .await?;
    println!(
        "the operator wrote fresh status {:.1} s after the API server came back",
        back.elapsed().as_secs_f64()
    );

    drop(system);
    cluster.shutdown().await;
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
