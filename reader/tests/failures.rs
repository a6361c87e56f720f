//! The reader binary against LocalStack under faults that last. A message the sink rejects with no
//! dead-letter sink to take it is released with a visibility delay that grows with its receive
//! count (1 s, 2 s, 4 s, ... capped), so within 30 s each message is received at most 5 times. A
//! fault that is the sink's (a missing dead-letter queue, a missing bucket) holds the message
//! instead: it is received once and retried in the reader, well within the same bound. Nothing is
//! lost either way.
//!
//! Each test makes its own queues; without LocalStack they print SKIPPED and pass (see
//! `support::sqs`).

mod support;

use std::time::Duration;

use support::process::Reader;
use support::sink_server::SinkServer;
use support::sqs::Sqs;

const SECOND: Duration = Duration::from_secs(1);
/// How long each fault is held.
const FAULT: Duration = Duration::from_secs(30);
/// Receives of one message within [`FAULT`] under the schedule 1 + 2 + 4 + 8 + 16 s.
const RECEIVES_PER_MESSAGE: f64 = 5.0;

fn spec(queue: &str, endpoint: &str, sink_url: &str, extra: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {{name: it}}\nspec:\n  \
         queues: [{{url: '{queue}', endpoint: '{endpoint}'}}]\n  receive: {{waitTimeSeconds: 1}}\n  \
         sinks: [{{name: web, http: {{url: '{sink_url}', timeoutMs: 2000}}}}]\n  \
         delivery: {{retry: {{maxAttempts: 1}}}}\n{extra}"
    )
}

fn poison(n: usize) -> Vec<(String, Option<String>)> {
    (0..n).map(|i| (format!("poison-{i}"), None)).collect()
}

#[tokio::test]
async fn a_permanently_rejecting_sink_is_retried_on_the_backoff_schedule() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("e1-reject", false, 30).await;
    sqs.send(&queue, &poison(3)).await;
    let yaml = spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), "");
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
    let (visible, in_flight) = sqs.counts(&queue).await;
    assert_eq!(visible + in_flight, 3, "nothing is lost");
    assert!(sink.received().is_empty());
}

#[tokio::test]
async fn a_missing_dead_letter_queue_backs_off_until_it_exists() {
    let Some(sqs) = Sqs::connect().await else { return };
    let (_sink, addr) = SinkServer::start().await;
    let queue = sqs.queue("e1-nodlq", false, 30).await;
    let dlq = sqs.queue("e1-dlq", false, 30).await;
    let dlq_name = dlq.rsplit('/').next().unwrap().to_owned();
    sqs.client.delete_queue().queue_url(&dlq).send().await.unwrap();
    sqs.send(&queue, &poison(3)).await;
    let extra = format!(
        "  deadLetterSink: {{name: dlq, sqs: {{queueUrl: '{dlq}', endpoint: '{}'}}}}\n",
        sqs.endpoint
    );
    let mut reader = Reader::start(&spec(&queue, &sqs.endpoint, &format!("http://{addr}/"), &extra), &[]);
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
    let recreated = sqs.client.create_queue().queue_name(&dlq_name).send().await.unwrap().queue_url.unwrap();
    assert_eq!(recreated, dlq);
    let dead = reader.wait_metric("sluice_reader_dead_lettered_messages_total", 3.0, 50 * SECOND).await;
    assert_eq!(dead, 3.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(sqs.wait_counts(&queue, (0, 0), 5 * SECOND).await, (0, 0));
    assert_eq!(sqs.drain(&dlq).await.len(), 3, "nothing is lost");
}

#[tokio::test]
async fn a_missing_bucket_backs_off_until_it_exists() {
    let Some(sqs) = Sqs::connect().await else { return };
    let queue = sqs.queue("e1-nobucket", false, 30).await;
    let bucket = format!("e1-nobucket-{}", fastrand::u64(..));
    sqs.send(&queue, &[("one".into(), None), ("two".into(), None), ("three".into(), None)]).await;
    let yaml = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {{name: it}}\nspec:\n  \
         queues: [{{url: '{queue}', endpoint: '{endpoint}'}}]\n  receive: {{waitTimeSeconds: 1}}\n  \
         sinks: [{{name: out, s3: {{bucket: '{bucket}', endpoint: '{endpoint}'}}}}]\n  \
         delivery: {{retry: {{maxAttempts: 1}}}}\n",
        endpoint = sqs.endpoint
    );
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
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(&sqs.endpoint)
        .credentials_provider(aws_sdk_s3::config::Credentials::new("test", "test", None, None, "tests"))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config).create_bucket().bucket(&bucket).send().await.unwrap();
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
    assert_eq!(sqs.wait_counts(&queue, (0, 0), 5 * SECOND).await, (0, 0), "nothing is lost");
}

async fn ready(reader: &mut Reader) -> bool {
    let admin = reader.admin().await;
    reqwest::get(format!("http://{admin}/readyz")).await.unwrap().status().is_success()
}
