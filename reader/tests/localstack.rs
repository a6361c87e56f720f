//! The reader binary against LocalStack, end to end: delivery and deletes, dead-lettering,
//! failOnError, the SIGTERM drain, FIFO group order.
//!
//! Each test makes its own queues, so the tests run in parallel; each is bounded by timeouts.
//! LocalStack (SLUICE_LOCALSTACK_ENDPOINT, default http://127.0.0.1:4566) is started when it does not
//! answer (`sluice_tests::localstack`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sluice_tests::localstack::{LocalStack, Outgoing, QueueOptions, TestQueue, fresh_queue, sqs_client};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);

/// The source of these tests: one queue, long polls of 1 s, the `web` http sink at `sink_url`
/// with `timeout_ms`.
fn source(queue: &TestQueue, endpoint: &str, sink_url: &str, timeout_ms: u64) -> SourceYaml {
    SourceYaml::bare("it", &queue.url, endpoint)
        .wait_time(1)
        .sink("web", Sink::http(sink_url).timeout_ms(timeout_ms))
}

fn bodies(prefix: &str, n: usize) -> Vec<Outgoing> {
    (0..n).map(|i| Outgoing::new(format!("{prefix}-{i}"))).collect()
}

#[tokio::test]
async fn delivers_every_message_then_deletes_it() {
    let (sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("c1-deliver", 30).await.expect("LocalStack and a queue");
    queue.send_messages(bodies("msg", 300), 1).await.unwrap();
    let mut reader = Reader::start(&source(&queue, &endpoint, &format!("http://{addr}/"), 2000).yaml(), &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 300.0, 60 * SECOND).await;
    assert_eq!(deleted, 300.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (0, 0)).await.unwrap().pair(),
        (0, 0)
    );
    let ids: BTreeSet<String> = sink.received().into_iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 300, "every message reached the sink");
}

#[tokio::test]
async fn poison_goes_to_the_dead_letter_queue_with_its_reason() {
    let (sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("c1-poison", 30).await.expect("LocalStack and a queue");
    let dlq =
        TestQueue::create_with(queue.client(), "c1-dlq", false, &QueueOptions::visibility(30)).await.unwrap();
    let mut bodies: Vec<String> = (0..20).map(|i| format!("{{\"n\":{i}}}")).collect();
    bodies.push("not json".into());
    bodies.push("poison-1".into()); // not JSON either: poison before any sink
    bodies.push("\"poison-2\"".into()); // valid JSON, the sink answers 400
    let messages = bodies.into_iter().map(|body| Outgoing::new(body).attribute("origin", "test"));
    queue.send_messages(messages, 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 2000)
        .payload_format("json")
        .dead_letter("dlq", Sink::sqs(&dlq.url, &endpoint))
        .yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 23.0, 60 * SECOND).await;
    assert_eq!(deleted, 23.0, "stderr:\n{}", reader.stderr());
    assert_eq!(reader.metric("sluice_reader_dead_lettered_messages_total").await, 3.0);
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (0, 0)).await.unwrap().pair(),
        (0, 0)
    );
    let dead = dlq.drain_messages().await.unwrap();
    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    for m in &dead {
        let attrs = m.message_attributes().unwrap();
        let reason = attrs["sluice-dlq-reason"].string_value().unwrap().to_owned();
        assert_eq!(attrs["origin"].string_value(), Some("test"), "original attributes travel along");
        reasons.insert(m.body().unwrap().to_owned(), reason);
    }
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons["not json"].contains("not valid JSON"), "{reasons:?}");
    assert!(reasons["poison-1"].contains("not valid JSON"), "{reasons:?}");
    assert!(reasons["\"poison-2\""].contains("400"), "{reasons:?}");
    assert_eq!(sink.received().len(), 20);
}

#[tokio::test]
async fn fail_on_error_stops_with_exit_3_and_keeps_the_poison() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("c1-failonerror", 30).await.expect("LocalStack and a queue");
    let mut messages = bodies("ok", 9);
    messages.insert(4, Outgoing::new("poison-stop"));
    queue.send_messages(messages, 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 2000).fail_on_error().yaml();
    let mut reader = Reader::start(&yaml, &[]);
    assert_eq!(reader.exit_code(30 * SECOND).await, 3, "stderr:\n{}", reader.stderr());
    assert!(reader.stderr().contains("failOnError"), "{}", reader.stderr());
    let left = queue.drain_messages().await.unwrap();
    let bodies: Vec<&str> = left.iter().filter_map(|m| m.body()).collect();
    let stderr = reader.stderr();
    assert!(
        bodies.contains(&"poison-stop"),
        "the poison message is visible again at once: {bodies:?}\n{stderr}"
    );
}

#[tokio::test]
async fn sigterm_releases_undelivered_messages_at_once() {
    let (_sink, addr) = SinkServer::start().await;
    // A long visibility timeout: only an explicit release can make them visible quickly.
    let (endpoint, queue) = fresh_queue("c1-sigterm", 600).await.expect("LocalStack and a queue");
    queue.send_messages(bodies("slow", 20), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 120_000).retry_max_attempts(1).yaml();
    let mut reader = Reader::start(&yaml, &["--shutdown-deadline-seconds=3"]);
    let received = reader.wait_metric("sluice_reader_received_messages_total", 20.0, 30 * SECOND).await;
    assert_eq!(received, 20.0);
    let started = std::time::Instant::now();
    reader.sigterm();
    assert_eq!(reader.exit_code(15 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert!(started.elapsed() < 8 * SECOND, "the drain keeps to its deadline: {:?}", started.elapsed());
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (20, 0)).await.unwrap().pair(),
        (20, 0),
        "all 20 visible again, none deleted"
    );
}

#[tokio::test]
async fn fifo_groups_keep_their_order() {
    let endpoint = LocalStack::ensure().await.expect("LocalStack");
    let sqs = sqs_client(&endpoint);
    let (sink, addr) = SinkServer::start().await;
    let queue = TestQueue::create_with(&sqs, "c1-fifo", true, &QueueOptions::visibility(30)).await.unwrap();
    let mut messages = Vec::new();
    for seq in 0..30 {
        for group in 0..5 {
            messages.push(Outgoing::new(format!("g{group}-{seq:03}")).in_group(format!("g{group}")));
        }
    }
    queue.send_messages(messages, 1).await.unwrap();
    let mut reader = Reader::start(&source(&queue, &endpoint, &format!("http://{addr}/"), 2000).yaml(), &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 150.0, 90 * SECOND).await;
    assert_eq!(deleted, 150.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    let mut per_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in sink.received() {
        per_group.entry(r.body[..2].to_owned()).or_default().push(r.body);
    }
    assert_eq!(per_group.len(), 5);
    for (group, seen) in per_group {
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(seen, sorted, "group {group} out of order or duplicated");
        assert_eq!(seen.len(), 30);
    }
}

#[tokio::test]
async fn the_heartbeat_keeps_slow_messages_invisible() {
    let (sink, addr) = SinkServer::start().await;
    // Visibility 2 s, deliveries take 5 s: without extensions every message would come back.
    let (endpoint, queue) = fresh_queue("c1-heartbeat", 2).await.expect("LocalStack and a queue");
    queue.send_messages(bodies("wait-5000", 5), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 10_000).yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 5.0, 30 * SECOND).await;
    assert_eq!(deleted, 5.0, "stderr:\n{}", reader.stderr());
    assert_eq!(reader.metric("sluice_reader_received_messages_total").await, 5.0, "nothing was redelivered");
    assert_eq!(reader.metric("sluice_reader_redelivered_messages_total").await, 0.0);
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    assert_eq!(sink.received().len(), 5);
}

#[tokio::test]
async fn exactly_once_standalone_deletes_after_each_epoch_commits() {
    let (sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("c1-epochs", 30).await.expect("LocalStack and a queue");
    queue.send_messages(bodies("epoch", 100), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 2000).exactly_once(1).yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 100.0, 60 * SECOND).await;
    assert_eq!(deleted, 100.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (0, 0)).await.unwrap().pair(),
        (0, 0)
    );
    let ids: BTreeSet<String> = sink.received().into_iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 100);
}

#[tokio::test]
async fn the_rate_limit_holds_deliveries_back() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("c1-rate", 30).await.expect("LocalStack and a queue");
    queue.send_messages(bodies("rate", 150), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"), 2000).rate_limit(50).yaml();
    let started = std::time::Instant::now();
    let mut reader = Reader::start(&yaml, &[]);
    let delivered = reader.wait_metric("sluice_reader_delivered_messages_total", 150.0, 30 * SECOND).await;
    let took = started.elapsed();
    assert_eq!(delivered, 150.0);
    // 50 from the burst, then 100 at 50/s: at least 2 s; far less than that without the limit.
    assert!(took >= 2 * SECOND, "150 messages at 50/s took only {took:?}");
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
}
