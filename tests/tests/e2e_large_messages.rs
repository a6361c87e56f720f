//! Messages of SQS's largest size, 1 MiB (1,048,576 bytes of body, since 2025), through every
//! sink kind at once, against LocalStack: each sink must receive every body byte for byte.
//!
//! The reader runs as its own process (`sluice-reader`) with four sinks: http (the suites' own
//! CloudEvents receiver, whose 2 MB request limit takes a 1 MiB body), sqs (forwarded to a second
//! queue: a 1 MiB body with no attribute fits SQS's limit as it is), s3 (JSON lines, one object
//! per flush) and log (`body: true`, the body in the reader's log line). Every body is 1,048,576
//! ASCII characters, distinct per message (its sequence number first, then random filler), so a
//! truncation, a re-encoding or a mix-up between messages all show as a digest mismatch. The
//! backlog (100 MiB) is larger than what a reader holds at once (`held.maxBytes`, 64 MiB), so the
//! reader's peak RSS (VmHWM), printed, is what a pod draining 1 MiB messages needs (the operator's
//! default memory limit for readers, `operator/src/build/pod_shape.rs`); so are the AWS requests
//! it sent and what they are billed as (each 64 KiB chunk of an SQS payload one request).
//!
//! LocalStack's SQS takes 1 MiB messages: its queues default `MaximumMessageSize` to 1048576
//! (localstack-core 2026.3.0, `services/sqs/constants.py`), as SQS does since 2025.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use sha2::{Digest, Sha256};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, s3_client, sqs_client};
use sluice_tests::s3_objects;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

/// SQS's maximum message size since 2025, and so the largest body a source can receive.
const MAX_MESSAGE_BYTES: usize = 1_048_576;
const MESSAGES: usize = 100;
const WITHIN: Duration = Duration::from_secs(180);

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A body of exactly `MAX_MESSAGE_BYTES` ASCII characters: `seq-NNNN:` then random letters and
/// digits (no space, so the text log's `body=` field ends at the next space).
fn body(seq: usize) -> String {
    let mut body = format!("seq-{seq:04}:");
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    body.extend(
        (body.len()..MAX_MESSAGE_BYTES).map(|_| char::from(alphabet[fastrand::usize(..alphabet.len())])),
    );
    body
}

fn seq_of(body: &str) -> Option<usize> {
    body.strip_prefix("seq-")?.split(':').next()?.parse().ok()
}

/// Sends the bodies one per SendMessageBatch (a batch may carry 1 MiB in all).
async fn send(queue: &TestQueue, bodies: &[String]) -> Result<()> {
    for (i, body) in bodies.iter().enumerate() {
        let entry = SendMessageBatchRequestEntry::builder().id(format!("m{i}")).message_body(body).build()?;
        let sent = queue.client().send_message_batch().queue_url(&queue.url).entries(entry).send().await?;
        ensure!(sent.failed().is_empty(), "SendMessageBatch of a 1 MiB body failed: {:?}", sent.failed());
    }
    Ok(())
}

/// What one sink received: each body's digest by sequence number (and how many arrived).
#[derive(Debug, Default)]
struct Got {
    digests: BTreeMap<usize, String>,
    count: usize,
}

impl Got {
    fn add(&mut self, body: &[u8]) {
        self.count += 1;
        if let Some(seq) = std::str::from_utf8(body).ok().and_then(seq_of) {
            self.digests.insert(seq, sha(body));
        }
    }
}

fn from_http(sink: &SinkServer) -> Got {
    let mut got = Got::default();
    for event in sink.events() {
        got.add(&event.body);
    }
    got
}

async fn from_sqs(target: &TestQueue) -> Result<Got> {
    let mut got = Got::default();
    for message in target.drain_messages().await? {
        got.add(message.body().unwrap_or_default().as_bytes());
    }
    Ok(got)
}

async fn from_s3(client: &aws_sdk_s3::Client, bucket: &str) -> Result<Got> {
    let mut got = Got::default();
    for object in s3_objects::read_all(client, bucket, "large/").await? {
        for line in &object.lines {
            let record: serde_json::Value = serde_json::from_str(line).context("an s3 line")?;
            got.add(record["body"].as_str().context("a UTF-8 body written as text")?.as_bytes());
        }
    }
    Ok(got)
}

fn from_log(log: &str) -> Got {
    let mut got = Got::default();
    for line in log.lines().filter(|l| l.contains("sink=\"audit\"") || l.contains("sink=audit")) {
        if let Some(start) = line.find(" body=") {
            let rest = &line[start + " body=".len()..];
            got.add(rest.split(' ').next().unwrap_or_default().as_bytes());
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_bodies_reach_every_sink_kind_byte_for_byte() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let s3 = s3_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(60), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "large-src", false, &options).await?;
    let target = TestQueue::create_with(&sqs, "large-dst", false, &options).await?;
    let bucket = format!("large-{:012x}", fastrand::u64(..1 << 48));
    s3.create_bucket().bucket(&bucket).send().await.context("CreateBucket")?;
    let http = SinkServer::start("127.0.0.1:0").await?;

    let yaml = SourceYaml::bare("large", &queue.url, &endpoint)
        .visibility_timeout(60)
        .sink("webhook", Sink::http(&http.url()).timeout_ms(10_000))
        .sink("forward", Sink::sqs(&target.url, &endpoint))
        .sink("archive", Sink::s3(&bucket, "large/", &endpoint).buffer(8 << 20, 1000, 1))
        .sink("audit", Sink::log_bodies())
        .yaml();
    let bodies: Vec<String> = (0..MESSAGES).map(body).collect();
    ensure!(bodies.iter().all(|b| b.len() == MAX_MESSAGE_BYTES));
    let expected: BTreeMap<usize, String> =
        bodies.iter().enumerate().map(|(i, b)| (i, sha(b.as_bytes()))).collect();
    let sending = Instant::now();
    send(&queue, &bodies).await?;
    println!(
        "sent {MESSAGES} bodies of {MAX_MESSAGE_BYTES} bytes in {:.1}s",
        sending.elapsed().as_secs_f64()
    );

    // A backlog waiting when the reader starts: every poller's first receive brings 10 MiB.
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let reader = Reader::start(dir.path(), &yaml)?;
    http.wait_for_distinct(MESSAGES as u64, WITHIN).await.with_context(|| reader.log())?;
    let counts = queue.wait_counts(WITHIN, Duration::from_millis(500), |c| c.total() == 0).await?;
    ensure!(counts.total() == 0, "the source queue never emptied: {counts:?}");
    let peak = reader.peak_rss_mib()?;
    let sent_requests = reader.metric("sluice_reader_aws_requests_total").await?;
    let billed = reader.metric("sluice_reader_aws_billed_requests_total").await?;
    println!(
        "the reader sent {sent_requests} AWS requests, billed as {billed} (each 64 KiB chunk of an SQS payload is one)"
    );
    ensure!(billed > sent_requests, "1 MiB payloads must cost more than one billed request each");
    println!(
        "all {MESSAGES} delivered and deleted {:.1}s after the reader started; its peak RSS {peak} MiB \
         (VmHWM, debug build)",
        started.elapsed().as_secs_f64()
    );

    let got_http = from_http(&http);
    let got_sqs = from_sqs(&target).await?;
    let got_s3 = from_s3(&s3, &bucket).await?;
    let got_log = from_log(&std::fs::read_to_string(dir.path().join("reader.log"))?);
    for (sink, got) in [("http", &got_http), ("sqs", &got_sqs), ("s3", &got_s3), ("log", &got_log)] {
        println!(
            "{sink}: {} bodies, {} distinct, every one byte-identical: {}",
            got.count,
            got.digests.len(),
            got.digests == expected
        );
        ensure!(
            got.digests == expected,
            "{sink}: the bodies differ from those sent ({} of {MESSAGES} match)",
            got.digests.iter().filter(|(k, v)| expected.get(k) == Some(v)).count()
        );
    }
    drop(reader);
    http.stop().await?;
    queue.delete().await?;
    target.delete().await?;
    Ok(())
}
