//! The SIGTERM drain with the real binary against LocalStack: messages not yet handed to a sink
//! go back to the queue at once, only deliveries under way are awaited, an idle reader stops
//! promptly. The measured figures are printed; the bounds asserted are generous (a loaded
//! machine must not fail them), the figures are what to read.
//!
//! LocalStack is started when it does not answer (`sluice_tests::localstack`).

mod support;

use std::time::{Duration, Instant};

use sluice_tests::localstack::{Outgoing, TestQueue, fresh_queue};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);

fn spec(queue: &TestQueue, endpoint: &str, sink_url: &str) -> String {
    SourceYaml::bare("it", &queue.url, endpoint)
        .wait_time(20)
        .sink("web", Sink::http(sink_url).timeout_ms(30_000).concurrency(4))
        .retry_max_attempts(1)
        .yaml()
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
        &spec(&queue, &endpoint, &format!("http://{addr}/")),
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
async fn an_idle_reader_exits_promptly_on_sigterm() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("drain-idle", 30).await.expect("LocalStack and a queue");
    let mut reader = Reader::start(&spec(&queue, &endpoint, &format!("http://{addr}/")), &[]);
    reader.admin().await;
    // Let the pollers start their long polls (20 s) on the empty queue.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = Instant::now();
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    let exited_after = stopped.elapsed();
    println!("drain: idle reader exited {exited_after:?} after SIGTERM");
    assert!(exited_after < 3 * SECOND, "an idle reader stops promptly: {exited_after:?}");
}
