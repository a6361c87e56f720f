//! The reader binary against LocalStack under faults that last. A message the sink rejects with no
//! dead-letter sink to take it is released with a visibility delay that grows with its receive
//! count (1 s, 2 s, 4 s, ... capped), so within 30 s each message is received at most 5 times. A
//! fault that is the sink's (a missing dead-letter queue, a missing bucket) holds the message
//! instead: it is received once and retried in the reader, well within the same bound. Nothing is
//! lost either way.
//!
//! Each test makes its own queues; LocalStack is started when it does not answer
//! (`sluice_tests::localstack`).

mod support;

use std::time::Duration;

use sluice_tests::localstack::{Outgoing, QueueOptions, TestQueue, fresh_queue, s3_client};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);
/// How long each fault is held.
const FAULT: Duration = Duration::from_secs(30);
/// Receives of one message within [`FAULT`] under the schedule 1 + 2 + 4 + 8 + 16 s.
const RECEIVES_PER_MESSAGE: f64 = 5.0;

/// The source of these tests: long polls of 1 s, the `web` http sink at `sink_url`, one delivery
/// attempt before a message is released on the backoff schedule.
fn source(queue: &TestQueue, endpoint: &str, sink_url: &str) -> SourceYaml {
    SourceYaml::bare("it", &queue.url, endpoint)
        .wait_time(1)
        .sink("web", Sink::http(sink_url).timeout_ms(2000))
        .retry_max_attempts(1)
}

fn poison(n: usize) -> Vec<Outgoing> {
    (0..n).map(|i| Outgoing::new(format!("poison-{i}"))).collect()
}

#[tokio::test]
async fn a_permanently_rejecting_sink_is_retried_on_the_backoff_schedule() {
    let (sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("e1-reject", 30).await.expect("LocalStack and a queue");
    queue.send_messages(poison(3), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/")).yaml();
    let mut reader = Reader::start(&yaml, &["--unready-after-seconds=5"]);
    reader.wait_metric("sluice_reader_received_messages_total", 3.0, 30 * SECOND).await;
    tokio::time::sleep(FAULT).await;
    let received = reader.metric("sluice_reader_received_messages_total").await;
    println!("rejecting sink: {received} receives of 3 messages in {FAULT:?}");
    assert!(!ready(&mut reader).await, "not ready 5 s after the sink began to refuse everything");
    assert!(received <= 3.0 * RECEIVES_PER_MESSAGE, "{received} receives; stderr:\n{}", reader.stderr());
    assert!(received >= 6.0, "each message was tried again: {received}");
    let warnings =
        reader.stderr().lines().filter(|l| l.contains("WARN") && l.contains("sink web rejected")).count();
    println!("rejecting sink: {warnings} WARN lines for {received} rejections");
    // The first at once, then at most one per 10 s: 4 in 30 s and the wait before it.
    assert!((1..=5).contains(&warnings), "{warnings} WARN lines; stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    let (visible, in_flight) = queue.approximate_counts().await.unwrap().pair();
    assert_eq!(visible + in_flight, 3, "nothing is lost");
    assert!(sink.received().is_empty());
}

#[tokio::test]
async fn a_missing_dead_letter_queue_backs_off_until_it_exists() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("e1-nodlq", 30).await.expect("LocalStack and a queue");
    let dlq =
        TestQueue::create_with(queue.client(), "e1-dlq", false, &QueueOptions::visibility(30)).await.unwrap();
    let (dlq_name, dlq_url) = (dlq.name.clone(), dlq.url.clone());
    dlq.delete().await.unwrap();
    queue.send_messages(poison(3), 1).await.unwrap();
    let yaml = source(&queue, &endpoint, &format!("http://{addr}/"))
        .dead_letter("dlq", Sink::sqs(&dlq_url, &endpoint))
        .yaml();
    let mut reader = Reader::start(&yaml, &[]);
    reader.wait_metric("sluice_reader_received_messages_total", 3.0, 30 * SECOND).await;
    tokio::time::sleep(FAULT).await;
    let received = reader.metric("sluice_reader_received_messages_total").await;
    println!("missing dead-letter queue: {received} receives of 3 messages in {FAULT:?}");
    assert!(received <= 3.0 * RECEIVES_PER_MESSAGE, "{received} receives; stderr:\n{}", reader.stderr());
    assert_eq!(reader.metric("sluice_reader_dead_lettered_messages_total").await, 0.0);
    assert!(!ready(&mut reader).await, "not ready while the dead-letter queue is missing");
    assert!(reader.stderr().contains("spec.deadLetterSink.sqs.queueUrl: queue "), "{}", reader.stderr());

    // The fault is removed: the next receive of each message dead-letters it (the last delay
    // was at most 16 s, the one before the next receive at most 32 s).
    let dlq = TestQueue::create_named(queue.client(), &dlq_name, &QueueOptions::default()).await.unwrap();
    assert_eq!(dlq.url, dlq_url);
    let dead = reader.wait_metric("sluice_reader_dead_lettered_messages_total", 3.0, 50 * SECOND).await;
    assert_eq!(dead, 3.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (0, 0)).await.unwrap().pair(),
        (0, 0)
    );
    assert_eq!(dlq.drain_messages().await.unwrap().len(), 3, "nothing is lost");
}

#[tokio::test]
async fn a_missing_bucket_backs_off_until_it_exists() {
    let (endpoint, queue) = fresh_queue("e1-nobucket", 30).await.expect("LocalStack and a queue");
    let bucket = format!("e1-nobucket-{}", fastrand::u64(..));
    queue.send_messages(["one", "two", "three"].map(Outgoing::new), 1).await.unwrap();
    let yaml = SourceYaml::bare("it", &queue.url, &endpoint)
        .wait_time(1)
        .sink("out", Sink::s3_bucket(&bucket, &endpoint))
        .retry_max_attempts(1)
        .yaml();
    let mut reader = Reader::start(&yaml, &["--unready-after-seconds=5"]);
    reader.wait_metric("sluice_reader_received_messages_total", 3.0, 30 * SECOND).await;
    tokio::time::sleep(FAULT).await;
    let received = reader.metric("sluice_reader_received_messages_total").await;
    println!("missing bucket: {received} receives of 3 messages in {FAULT:?}");
    assert!(
        !ready(&mut reader).await,
        "not ready after 5 s without a delivery; stderr:\n{}",
        reader.stderr()
    );
    assert!(received <= 3.0 * RECEIVES_PER_MESSAGE, "{received} receives; stderr:\n{}", reader.stderr());

    // The fault is removed: every message is written and deleted on its next receive.
    s3_client(&endpoint).create_bucket().bucket(&bucket).send().await.unwrap();
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 3.0, 50 * SECOND).await;
    assert_eq!(deleted, 3.0, "stderr:\n{}", reader.stderr());
    let mut ready_again = false;
    for _ in 0..50 {
        ready_again = ready(&mut reader).await;
        if ready_again {
            break;
        }
        tokio::time::sleep(SECOND / 10).await;
    }
    assert!(ready_again, "ready again once deliveries succeed; stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(
        queue.wait_counts(5 * SECOND, SECOND / 5, |c| c.pair() == (0, 0)).await.unwrap().pair(),
        (0, 0),
        "nothing is lost"
    );
}

async fn ready(reader: &mut Reader) -> bool {
    let admin = reader.admin().await;
    reqwest::get(format!("http://{admin}/readyz")).await.unwrap().status().is_success()
}
