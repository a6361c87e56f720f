//! The SIGTERM drain with the real binary against LocalStack: messages not yet handed to a sink
//! go back to the queue at once, only deliveries under way are awaited, an idle reader stops
//! promptly, and in a cluster (the real test cluster, behind a slow link) the
//! reader's last report says it is draining before it exits. The measured figures are printed;
//! the bounds asserted are generous (a loaded machine must not fail them), the figures are what
//! to read.
//!
//! LocalStack is started when it does not answer (`sluice_tests::localstack`).

mod support;

use std::time::{Duration, Instant};

use sluice_crds::{HELD_REPORT_KEY, HeldReport};
use sluice_protocol::lease_configmap_name;
use sluice_tests::latency_proxy::{Delay, LatencyProxy};
use sluice_tests::localstack::{Outgoing, TestQueue, fresh_queue};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, bin_dir};
use sluice_tests::{install, kubeconfig};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);

/// The readers' source: 20 s long polls, a slow http sink taking four at a time, no retries.
fn spec(queue: &TestQueue, endpoint: &str, sink_url: &str) -> SourceYaml {
    SourceYaml::bare("it", &queue.url, endpoint)
        .wait_time(20)
        .sink("web", Sink::http(sink_url).timeout_ms(30_000).concurrency(4))
        .retry_max_attempts(1)
}

/// Poll (bounded) until at least `visible` messages are visible; the time it took.
async fn until_visible(queue: &TestQueue, visible: u64, within: Duration) -> (Duration, (u64, u64)) {
    let started = Instant::now();
    let counts =
        queue.wait_counts(within, Duration::from_millis(20), |c| c.visible >= visible).await.unwrap();
    (started.elapsed(), counts.pair())
}

#[tokio::test]
async fn sigterm_releases_unstarted_messages_at_once_and_finishes_those_under_way() {
    let (sink, addr) = SinkServer::start().await;
    // A long visibility timeout: only an explicit release makes a message visible quickly.
    let (endpoint, queue) = fresh_queue("drain-slow", 600).await.expect("LocalStack and a queue");
    queue.send_messages((0..30).map(|i| Outgoing::new(format!("wait-4000-{i}"))), 1).await.unwrap();
    let mut reader = Reader::start(
        &spec(&queue, &endpoint, &format!("http://{addr}/")).yaml(),
        &["--shutdown-deadline-seconds=30"],
    );
    let received = reader.wait_metric("sluice_reader_received_messages_total", 30.0, 30 * SECOND).await;
    assert_eq!(received, 30.0, "stderr:\n{}", reader.stderr());
    // Four requests are on the wire (concurrency 4), 26 messages wait for a permit.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = Instant::now();
    reader.sigterm();
    let (released_after, counts) = until_visible(&queue, 26, 10 * SECOND).await;
    println!(
        "drain: {} of 30 visible again {released_after:?} after SIGTERM (in flight {})",
        counts.0, counts.1
    );
    assert!(counts.0 >= 26, "the 26 unstarted messages are released: {counts:?}\n{}", reader.stderr());
    assert!(released_after < 5 * SECOND, "released long after SIGTERM: {released_after:?}");
    assert_eq!(reader.exit_code(30 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    let exited_after = stopped.elapsed();
    println!("drain: exited {exited_after:?} after SIGTERM (deliveries under way take 4 s)");
    let delivered = sink.received().len();
    assert_eq!(delivered, 4, "the deliveries under way were finished, nothing else was started");
    let settled = queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (26, 0)).await.unwrap().pair();
    assert_eq!(settled, (26, 0), "the four delivered were deleted, the rest are visible");
}

#[tokio::test]
async fn an_idle_reader_exits_when_its_long_polls_land() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("drain-idle", 30).await.expect("LocalStack and a queue");
    let mut reader =
        Reader::start(&spec(&queue, &endpoint, &format!("http://{addr}/")).wait_time(2).yaml(), &[]);
    reader.admin().await;
    // Let the pollers start their long polls (2 s) on the empty queue.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = Instant::now();
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    let exited_after = stopped.elapsed();
    println!("drain: idle reader (2 s long polls) exited {exited_after:?} after SIGTERM");
    assert!(exited_after < 10 * SECOND, "an idle reader stops once its long polls land: {exited_after:?}");
}

/// The held report in ConfigMap `name` of the control plane at `api`, if written yet.
async fn held_report(system: &System, name: &str) -> Option<HeldReport> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(system.client.clone(), &system.namespace);
    let object = api.get_opt(name).await.ok()??;
    serde_json::from_str(object.data?.get(HELD_REPORT_KEY)?).ok()
}

/// An at-least-once reader in a cluster drains in well under a second when idle (its long polls
/// abandoned), while its last report, a read and a write of its lease ConfigMap, takes two round
/// trips of the API: 1 s each here, through a delay line. The drain waits for that report, so the
/// operator's autoscaler sees `draining: true` at once rather than counting a gone reader until
/// its report is stale.
#[tokio::test]
async fn a_cluster_reader_reports_draining_before_it_exits() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("drain-report", 30).await.expect("LocalStack and a queue");
    let dir = tempfile::tempdir().unwrap();
    let system = System::start(&bin_dir(), &dir.path().join("system")).await.unwrap();
    let api_addr = system.cluster().url.trim_start_matches("https://").parse().unwrap();
    let slow = LatencyProxy::start(api_addr, Delay::round_trip(SECOND, 0), None).await.unwrap();
    // The reader runs as a reader account (the shipped readers' ClusterRole, bound in the suite's
    // namespace), through the delay line.
    let direct_path = dir.path().join("reader.kubeconfig");
    let info = system.cluster();
    let (client, namespace) = (&system.client, &system.namespace);
    install::bind_reader_account(client, namespace, "it-reader").await.unwrap();
    install::account_kubeconfig(client, &info.url, &info.ca, namespace, "it-reader", &direct_path)
        .await
        .unwrap();
    let config = dir.path().join("kubeconfig");
    let direct = std::fs::read_to_string(&direct_path).unwrap();
    let through = format!("https://{}", slow.addr());
    kubeconfig::write(&config, &kubeconfig::retarget(&direct, &through)).unwrap();
    let pod = "it-reader-0";
    let env = [("KUBECONFIG", config.to_str().unwrap()), ("POD_NAME", pod)];
    // 1 s long polls: the drain does not wait long for them to land.
    let yaml = spec(&queue, &endpoint, &format!("http://{addr}/")).wait_time(1).yaml();
    let mut reader = Reader::start_with_env(&yaml, &["--coordination=kubernetes"], "info", &env);
    let lease = lease_configmap_name("it", pod);
    let started = Instant::now();
    while held_report(&system, &lease).await.is_none() {
        assert!(started.elapsed() < 60 * SECOND, "no report within 60 s; stderr:\n{}", reader.stderr());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stopped = Instant::now();
    reader.sigterm();
    assert_eq!(reader.exit_code(30 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    let exited_after = stopped.elapsed();
    let report = held_report(&system, &lease).await.expect("the report is still there");
    println!(
        "drain: cluster reader exited {exited_after:?} after SIGTERM, draining: {}",
        report.reader.draining
    );
    assert!(report.reader.draining, "the last report says draining; stderr:\n{}", reader.stderr());
    assert_eq!(report.reader.drain_millis_per_second, 0, "a draining reader reports no drain rate");
}

/// A reader stopped while its long polls wait on an empty queue: messages that become visible
/// right after (a peer's hand-back in a scale-in, a producer's send) must not vanish into a long
/// poll the stopping reader hung up on, which SQS keeps open and serves until its wait ends,
/// hiding what it hands out for a whole visibility timeout (60 s here). The reader lets each
/// receive on the wire land and hands back what it brought, so every message is visible again
/// within seconds.
#[tokio::test]
async fn messages_sent_while_a_stopping_reader_has_long_polls_out_stay_visible() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("drain-polls", 60).await.expect("LocalStack and a queue");
    let yaml = spec(&queue, &endpoint, &format!("http://{addr}/")).pollers(4).yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let polls = reader.wait_metric("sluice_reader_receive_calls_total", 4.0, 30 * SECOND).await;
    assert!(polls >= 4.0, "the pollers never sent their long polls; stderr:\n{}", reader.stderr());
    reader.sigterm();
    // Past the moment a stopping reader used to hang up on a poll it had nothing to hand back for.
    tokio::time::sleep(SECOND).await;
    queue.send_messages((0..20).map(|i| Outgoing::new(format!("late-{i}"))), 1).await.unwrap();
    let (visible_after, counts) = until_visible(&queue, 20, 15 * SECOND).await;
    let code = reader.exit_code(30 * SECOND).await;
    println!(
        "drain: 20 messages sent 1 s after SIGTERM, {} visible {visible_after:?} later (in flight {})",
        counts.0, counts.1
    );
    assert_eq!(counts.0, 20, "every message visible again within seconds: {counts:?}\n{}", reader.stderr());
    assert_eq!(code, 0, "stderr:\n{}", reader.stderr());
}
