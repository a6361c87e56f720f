//! An S3 outage never costs a message a receive: a standalone at-least-once reader
//! (`sluice-reader --source`) resolving Amazon SQS Extended Client pointers, on a queue whose
//! RedrivePolicy moves a message to a real dead-letter queue after 3 receives, with its payload
//! endpoint (`spec.payload.s3.endpoint`) refusing every connection for a while and then
//! reaching LocalStack's S3 through a plain TCP forwarder on the same port.
//!
//! The outage lasts `SLUICE_PAYLOAD_OUTAGE_SECONDS` (default 45: with the old release after a
//! failed fetch, and its visibility backoff of 1, 2, 4 s, every message received meanwhile would
//! have spent its 3 receives and been dead-lettered well within it).
//!
//! What must hold: nothing in the dead-letter queue, during the outage or after; every message
//! delivered after it with its object's exact bytes; each message's receive count (the log
//! sink's `receive_count`) 1 or 2; and the fault showed: fetches counted as failed and the
//! reader not ready (`spec.delivery.unreadyAfterSeconds: 10`) during the outage, ready after.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use bytes::Bytes;
use sluice_tests::localstack::{LocalStack, QueueOptions, Redrive, TestQueue, s3_client, sqs_client};
use sluice_tests::outage::Outage;
use sluice_tests::poll::{Check, until};
use sluice_tests::scrape::metric;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

const MESSAGES: usize = 50;
const MAX_RECEIVE_COUNT: u32 = 3;
const UNREADY_AFTER_SECONDS: u32 = 10;
/// Generous bounds for a busy 2-core machine.
const FAILING_WITHIN: Duration = Duration::from_secs(60);
const DELIVERED_WITHIN: Duration = Duration::from_secs(180);

fn outage_seconds() -> u64 {
    std::env::var("SLUICE_PAYLOAD_OUTAGE_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(45)
}

fn source_yaml(queue: &TestQueue, endpoint: &str, payload_endpoint: &str, http: &str) -> String {
    SourceYaml::bare("payload-outage", &queue.url, endpoint)
        .wait_time(1)
        .payload_s3(payload_endpoint)
        .unready_after(UNREADY_AFTER_SECONDS)
        .sink("webhook", Sink::http(http))
        .sink("audit", Sink::log())
        .yaml()
}

/// Object `i`'s bytes: deterministic, of varied sizes, not UTF-8.
fn object_bytes(i: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(i as u64 + 1);
    let mut bytes = vec![0u8; 1 + rng.usize(..48 * 1024)];
    rng.fill(&mut bytes);
    bytes[0] = 0xff;
    bytes
}

/// Uploads the objects and sends one Extended Client pointer per object; answers each message
/// id's expected body.
async fn send_pointers(
    s3: &aws_sdk_s3::Client,
    queue: &TestQueue,
    bucket: &str,
) -> Result<BTreeMap<String, Bytes>> {
    let mut expected = BTreeMap::new();
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(10) {
        let mut entries = Vec::new();
        let mut bodies = BTreeMap::new();
        for &i in chunk {
            let (key, bytes) = (format!("payload/{i}.bin"), object_bytes(i));
            s3.put_object().bucket(bucket).key(&key).body(bytes.clone().into()).send().await?;
            let pointer = serde_json::json!([
                "software.amazon.payloadoffloading.PayloadS3Pointer",
                {"s3BucketName": bucket, "s3Key": key}
            ]);
            let size = MessageAttributeValue::builder()
                .data_type("Number")
                .string_value(bytes.len().to_string())
                .build()?;
            entries.push(
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(pointer.to_string())
                    .message_attributes("ExtendedPayloadSize", size)
                    .build()?,
            );
            bodies.insert(i.to_string(), Bytes::from(bytes));
        }
        let sent = queue
            .client()
            .send_message_batch()
            .queue_url(&queue.url)
            .set_entries(Some(entries))
            .send()
            .await?;
        ensure!(sent.failed().is_empty(), "SendMessageBatch failed for {:?}", sent.failed());
        for ok in sent.successful() {
            expected.insert(ok.message_id().to_owned(), bodies[ok.id()].clone());
        }
    }
    Ok(expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_outage_holds_messages_instead_of_dead_lettering_them() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let seconds = outage_seconds();
    let dlq = TestQueue::create(&sqs, "payload-outage-dlq", false).await?;
    let redrive = Redrive { dead_letter_arn: dlq.arn().await?, max_receive_count: MAX_RECEIVE_COUNT };
    let options =
        QueueOptions { visibility_timeout: Some(10), redrive: Some(redrive), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "payload-outage", false, &options).await?;
    let bucket = format!("payload-outage-{:016x}", fastrand::u64(..));
    s3.create_bucket().bucket(&bucket).send().await.context("CreateBucket")?;
    let expected = send_pointers(&s3, &queue, &bucket).await?;

    // The payload endpoint refuses connections until S3 comes back on the same port.
    let mut s3_port = Outage::down(&endpoint)?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = tempfile::tempdir()?;
    let yaml = source_yaml(&queue, &endpoint, &s3_port.endpoint(), &sink.url());
    let reader = Reader::start(dir.path(), &yaml)?;
    let started = Instant::now();

    // The fault shows: fetches fail, and after unreadyAfterSeconds the reader is not ready.
    until(FAILING_WITHIN, Duration::from_millis(500), || async {
        let text = match reader.metrics().await {
            Ok(text) => text,
            Err(e) => return Ok(Check::NotYet(format!("no metrics yet: {e:#}"))),
        };
        let failed = text.lines().any(|l| l.contains("fetch_failed") && !l.ends_with(" 0"));
        let ready = metric(&text, "sluice_reader_ready").unwrap_or(1.0);
        Ok(Check::met_if(failed && ready == 0.0, || format!("fetch failures: {failed}, ready: {ready}")))
    })
    .await
    .with_context(|| reader.log())?;
    let unready_after = started.elapsed();
    tokio::time::sleep(Duration::from_secs(seconds).saturating_sub(started.elapsed())).await;
    let delivered_during = sink.stats().distinct;
    let dead_during = dlq.approximate_counts().await?.total();
    let failures = reader.metrics().await?;
    let failures = failures.lines().find(|l| l.contains("fetch_failed")).unwrap_or_default().to_owned();
    ensure!(dead_during == 0, "{dead_during} messages in the DLQ during the outage");
    ensure!(delivered_during == 0, "{delivered_during} messages delivered while S3 refused connections");

    // S3 comes back on the same port.
    s3_port.restore().await?;
    let stats =
        sink.wait_for_distinct(MESSAGES as u64, DELIVERED_WITHIN).await.with_context(|| reader.log())?;
    until(Duration::from_secs(60), Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        let ready = reader.metric("sluice_reader_ready").await?;
        Ok(Check::met_if(left == 0 && ready == 1.0, || {
            format!("{left} messages left in the queue, ready {ready}")
        }))
    })
    .await
    .with_context(|| reader.log())?;

    let mut bodies: BTreeMap<String, Bytes> = BTreeMap::new();
    for event in sink.events() {
        bodies.insert(event.id.clone(), event.body.clone());
    }
    let identical = expected.iter().filter(|(id, body)| bodies.get(*id) == Some(*body)).count();
    let counts = reader.receive_counts("audit");
    let mut histogram: BTreeMap<u32, usize> = BTreeMap::new();
    for id in expected.keys() {
        *histogram.entry(counts.get(id).copied().unwrap_or(0)).or_insert(0) += 1;
    }
    let received = reader.metric("sluice_reader_received_messages_total").await?;
    let dead_lettered = dlq.drain_count().await?;
    println!(
        "S3 refusing for {seconds} s (not ready after {:.1} s; {failures}): {identical} of {MESSAGES} delivered byte-identical ({} duplicates), {dead_lettered} in the DLQ, receive counts {histogram:?}, {received} messages received in all",
        unready_after.as_secs_f64(),
        stats.duplicates
    );
    ensure!(dead_lettered == 0, "{dead_lettered} messages reached the DLQ");
    ensure!(identical == MESSAGES, "{identical} of {MESSAGES} bodies byte-identical");
    ensure!(
        histogram.keys().all(|c| (1..=2).contains(c)),
        "receive counts {histogram:?} (0: no log line for it)\n{}",
        reader.log()
    );
    drop(reader);
    sink.stop().await?;
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}
