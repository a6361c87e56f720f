//! The reader binary against LocalStack, end to end: delivery and deletes, dead-lettering,
//! failOnError, the SIGTERM drain, FIFO group order.
//!
//! Each test makes its own queues, so the tests run in parallel; each is bounded by timeouts.
//! Without LocalStack (SLUICE_LOCALSTACK_ENDPOINT, default http://127.0.0.1:4566) they print
//! SKIPPED and pass.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::process::Reader;
use support::sink_server::SinkServer;
use support::sqs::Sqs;

const SECOND: Duration = Duration::from_secs(1);

fn spec(queue: &str, endpoint: &str, sink_url: &str, extra: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {{name: it}}\nspec:\n  \
         queues: [{{url: '{queue}', endpoint: '{endpoint}'}}]\n  receive: {{waitTimeSeconds: 1}}\n  \
         sinks: [{{name: web, http: {{url: '{sink_url}', timeoutMs: 2000}}}}]\n{extra}"
    )
}

fn bodies(prefix: &str, n: usize) -> Vec<(String, Option<String>)> {
    (0..n).map(|i| (format!("{prefix}-{i}"), None)).collect()
}

#[tokio::test]
async fn delivers_every_message_then_deletes_it() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-deliver", false, 30).await;
    sqs.send(&queue, &bodies("msg", 300)).await;
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), ""), &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 300.0, 60 * SECOND).await;
    assert_eq!(deleted, 300.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(sqs.wait_counts(&queue, (0, 0), 5 * SECOND).await, (0, 0));
    let ids: BTreeSet<String> = sink.received().into_iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 300, "every message reached the sink");
}

#[tokio::test]
async fn poison_goes_to_the_dead_letter_queue_with_its_reason() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-poison", false, 30).await;
    let dlq = sqs.queue("c1-dlq", false, 30).await;
    let mut messages: Vec<(String, Option<String>)> =
        (0..20).map(|i| (format!("{{\"n\":{i}}}"), None)).collect();
    messages.push(("not json".into(), None));
    messages.push(("poison-1".into(), None)); // not JSON either: poison before any sink
    messages.push(("\"poison-2\"".into(), None)); // valid JSON, the sink answers 400
    sqs.send(&queue, &messages).await;
    let extra = format!(
        "  payload: {{format: json}}\n  deadLetterSink: {{name: dlq, sqs: {{queueUrl: '{dlq}', endpoint: '{}'}}}}\n",
        sqs.endpoint
    );
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), &extra), &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 23.0, 60 * SECOND).await;
    assert_eq!(deleted, 23.0, "stderr:\n{}", reader.stderr());
    assert_eq!(reader.metric("sluice_reader_dead_lettered_messages_total").await, 3.0);
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    assert_eq!(sqs.wait_counts(&queue, (0, 0), 5 * SECOND).await, (0, 0));
    let dead = sqs.drain(&dlq).await;
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
    let Some(sqs) = Sqs::connect().await else { return };
    let (_sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-failonerror", false, 30).await;
    let mut messages = bodies("ok", 9);
    messages.insert(4, ("poison-stop".into(), None));
    sqs.send(&queue, &messages).await;
    let extra = "  delivery: {failOnError: true}\n";
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), extra), &[]);
    assert_eq!(reader.exit_code(30 * SECOND).await, 3, "stderr:\n{}", reader.stderr());
    assert!(reader.stderr().contains("failOnError"), "{}", reader.stderr());
    let left = sqs.drain(&queue).await;
    let bodies: Vec<&str> = left.iter().filter_map(|m| m.body()).collect();
    let stderr = reader.stderr();
    assert!(
        bodies.contains(&"poison-stop"),
        "the poison message is visible again at once: {bodies:?}\n{stderr}"
    );
}

#[tokio::test]
async fn sigterm_releases_undelivered_messages_at_once() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (_sink, addr) = SinkServer::start().await;
    // A long visibility timeout: only an explicit release can make them visible quickly.
    let queue = sqs.queue("c1-sigterm", false, 600).await;
    sqs.send(&queue, &bodies("slow", 20)).await;
    let extra = "  delivery: {retry: {maxAttempts: 1}}\n";
    let yaml = spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), extra)
        .replace("timeoutMs: 2000", "timeoutMs: 120000");
    let mut reader = Reader::start(&yaml, &["--shutdown-deadline-seconds=3"]);
    let received = reader.wait_metric("sluice_reader_received_messages_total", 20.0, 30 * SECOND).await;
    assert_eq!(received, 20.0);
    let started = std::time::Instant::now();
    reader.sigterm();
    assert_eq!(reader.exit_code(15 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert!(started.elapsed() < 8 * SECOND, "the drain keeps to its deadline: {:?}", started.elapsed());
    assert_eq!(
        sqs.wait_counts(&queue, (20, 0), 5 * SECOND).await,
        (20, 0),
        "all 20 visible again, none deleted"
    );
}

#[tokio::test]
async fn fifo_groups_keep_their_order() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-fifo", true, 30).await;
    let mut messages = Vec::new();
    for seq in 0..30 {
        for group in 0..5 {
            messages.push((format!("g{group}-{seq:03}"), Some(format!("g{group}"))));
        }
    }
    sqs.send(&queue, &messages).await;
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), ""), &[]);
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
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    // Visibility 2 s, deliveries take 5 s: without extensions every message would come back.
    let queue = sqs.queue("c1-heartbeat", false, 2).await;
    sqs.send(&queue, &bodies("wait-5000", 5)).await;
    let yaml = spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), "")
        .replace("timeoutMs: 2000", "timeoutMs: 10000");
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
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-epochs", false, 30).await;
    sqs.send(&queue, &bodies("epoch", 100)).await;
    let extra = "  delivery: {guarantee: exactlyOnce, checkpointIntervalSeconds: 1}\n";
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), extra), &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 100.0, 60 * SECOND).await;
    assert_eq!(deleted, 100.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
    assert_eq!(sqs.wait_counts(&queue, (0, 0), 5 * SECOND).await, (0, 0));
    let ids: BTreeSet<String> = sink.received().into_iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 100);
}

#[tokio::test]
async fn the_rate_limit_holds_deliveries_back() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (_sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("c1-rate", false, 30).await;
    sqs.send(&queue, &bodies("rate", 150)).await;
    let extra = "  rateLimit: {messagesPerSecond: 50}\n";
    let started = std::time::Instant::now();
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), extra), &[]);
    let delivered = reader.wait_metric("sluice_reader_delivered_messages_total", 150.0, 30 * SECOND).await;
    let took = started.elapsed();
    assert_eq!(delivered, 150.0);
    // 50 from the burst, then 100 at 50/s: at least 2 s; far less than that without the limit.
    assert!(took >= 2 * SECOND, "150 messages at 50/s took only {took:?}");
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0);
}
