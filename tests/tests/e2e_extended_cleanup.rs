//! `spec.payload.extendedClient.deleteObjects`, end to end against LocalStack: messages sent by
//! the Amazon SQS Extended Client for Python (PyPI, pinned in tests/scripts/pyclients.sh) with
//! 300 KiB bodies, read by a `sluice-reader` process; afterwards the bucket is listed.
//!
//! What must hold: with the option on the objects are gone once their messages are; with it off
//! they stay; under exactlyOnce an object is never gone while its message is still in the queue
//! (its epoch not yet committed); a pointer that could not be resolved is dead-lettered as the
//! pointer and keeps its object, which the Extended Client still reads through the dead letter.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use sluice_tests::localstack::{LocalStack, TestQueue, s3_client, sqs_client};
use sluice_tests::poll::{Check, until};
use sluice_tests::scrape::metric;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::{Reader, python};

const KIB: usize = 1024;
const WITHIN: Duration = Duration::from_secs(120);

fn random_name(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// Sends each body with the Python Extended Client, offloaded to `bucket` (every body here is over
/// its 256 KiB threshold).
fn extended_send(endpoint: &str, queue: &str, bucket: &str, bodies: &[String]) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["xsend".to_owned(), queue.to_owned(), bucket.to_owned()];
    for (i, body) in bodies.iter().enumerate() {
        let path = dir.path().join(i.to_string());
        std::fs::write(&path, body)?;
        args.push(path.to_string_lossy().into_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    python(endpoint, &args)?;
    Ok(())
}

fn text_body(len: usize, seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.alphanumeric()).collect()
}

/// `sluice_reader_payload_object_deletes_total{outcome}` as `reader` exports it now.
async fn object_deletes(reader: &Reader, outcome: &str) -> Result<f64> {
    let text = reader.metrics().await?;
    let name = "sluice_reader_payload_object_deletes_total";
    let line = text.lines().find(|l| l.starts_with(&format!("{name}{{outcome=\"{outcome}\"}}")));
    Ok(line.and_then(|l| metric(l, name)).unwrap_or(0.0))
}

/// Waits until `reader` counted `want` objects `deleted` (the count follows the DeleteObjects answer,
/// so it may trail the bucket listing by a moment); fails if it counts more.
async fn wait_deleted(reader: &Reader, want: f64) -> Result<()> {
    until(WITHIN, Duration::from_millis(200), || async {
        let n = object_deletes(reader, "deleted").await?;
        ensure!(n <= want, "the reader deleted {n} objects, expected {want}");
        Ok(Check::met_if(n == want, || format!("the reader counted {n} objects deleted, expected {want}")))
    })
    .await
}

/// The source of these tests: one queue, long polls of 1 s, Extended Client payloads read from
/// `endpoint`, the `webhook` http sink at `http`.
fn source(name: &str, queue: &TestQueue, endpoint: &str, http: &str) -> SourceYaml {
    SourceYaml::bare(name, &queue.url, endpoint)
        .wait_time(1)
        .payload_s3(endpoint)
        .sink("webhook", Sink::http(http))
}

async fn object_count(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<usize> {
    Ok(s3.list_objects_v2().bucket(bucket).send().await?.key_count().unwrap_or(0) as usize)
}

async fn queue_total(queue: &TestQueue) -> Result<u64> {
    Ok(queue.approximate_counts().await?.total())
}

/// Waits until `queue` holds nothing, visible or in flight.
async fn wait_empty(queue: &TestQueue) -> Result<()> {
    until(WITHIN, Duration::from_millis(300), || async {
        let total = queue_total(queue).await?;
        Ok(Check::met_if(total == 0, || format!("{} still holds {total} messages", queue.name)))
    })
    .await
}

async fn wait_objects(s3: &aws_sdk_s3::Client, bucket: &str, want: usize) -> Result<()> {
    until(WITHIN, Duration::from_millis(300), || async {
        let n = object_count(s3, bucket).await?;
        Ok(Check::met_if(n == want, || format!("bucket {bucket} holds {n} objects, expected {want}")))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_go_with_their_messages_only_when_asked() -> Result<()> {
    const MESSAGES: usize = 3;
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let bodies: Vec<String> = (0..MESSAGES as u64).map(|i| text_body(300 * KIB, i)).collect();
    let mut runs = Vec::new();
    for (name, delete_objects) in [("xc-delete", true), ("xc-keep", false)] {
        let queue = TestQueue::create(&sqs, name, false).await?;
        let bucket = random_name(name);
        s3.create_bucket().bucket(&bucket).send().await?;
        extended_send(&endpoint, &queue.url, &bucket, &bodies)?;
        ensure!(object_count(&s3, &bucket).await? == MESSAGES, "the client offloaded every body");
        let dir = tempfile::tempdir()?;
        let source = source(name, &queue, &endpoint, &sink.url());
        let source = if delete_objects { source.delete_payload_objects() } else { source };
        let reader = Reader::start(dir.path(), &source.yaml())?;
        runs.push((queue, bucket, reader, dir));
    }
    sink.wait_for_distinct(2 * MESSAGES as u64, WITHIN).await?;
    ensure!(
        sink.events().iter().all(|e| e.body.len() == 300 * KIB),
        "the sink got the payloads, not the pointers"
    );
    for (queue, _, _, _) in &runs {
        wait_empty(queue).await?;
    }
    let (deleting, keeping) = (&runs[0], &runs[1]);
    wait_objects(&s3, &deleting.1, 0).await.with_context(|| deleting.2.log())?;
    wait_deleted(&deleting.2, MESSAGES as f64).await?;
    let failed = object_deletes(&deleting.2, "failed").await?;
    ensure!(failed == 0.0, "{failed} deletes failed: {}", deleting.2.log());
    // The keeping reader's messages were deleted too (its queue is empty): its objects stay.
    let kept = object_count(&s3, &keeping.1).await?;
    ensure!(kept == MESSAGES, "with deleteObjects off the bucket holds {kept} objects, expected {MESSAGES}");
    ensure!(object_deletes(&keeping.2, "deleted").await? == 0.0, "the keeping reader deleted objects");
    println!(
        "deleteObjects on: {MESSAGES} messages of 300 KiB delivered, bucket empty, sluice_reader_payload_object_deletes_total{{outcome=\"deleted\"}} {MESSAGES}; off: {kept} objects remain"
    );
    for (queue, _, reader, _) in runs {
        drop(reader);
        queue.delete().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_exactly_once_an_object_outlives_its_open_epoch() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let queue = TestQueue::create(&sqs, "xc-eo", false).await?;
    let bucket = random_name("xc-eo");
    s3.create_bucket().bucket(&bucket).send().await?;
    extended_send(&endpoint, &queue.url, &bucket, &[text_body(300 * KIB, 42)])?;
    // Epochs of 20 s: the message is delivered early in one and deleted only when it commits.
    let dir = tempfile::tempdir()?;
    let yaml =
        source("xc-eo", &queue, &endpoint, &sink.url()).delete_payload_objects().exactly_once(20).yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    sink.wait_for_distinct(1, WITHIN).await?;

    // Look at the object first, then at the queue: an object gone at the first look must belong to
    // a message already gone at the second.
    let (mut open_epoch_looks, started) = (0, Instant::now());
    loop {
        let objects = object_count(&s3, &bucket).await?;
        let messages = queue_total(&queue).await?;
        ensure!(
            objects == 1 || messages == 0,
            "the object was deleted while its message was still in the queue (epoch not committed)"
        );
        if messages == 0 {
            break;
        }
        open_epoch_looks += 1;
        ensure!(started.elapsed() < WITHIN, "the epoch never committed: {}", reader.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    ensure!(open_epoch_looks > 0, "the message was deleted before any look while its epoch was open");
    wait_objects(&s3, &bucket, 0).await.with_context(|| reader.log())?;
    println!(
        "exactlyOnce: object present in {open_epoch_looks} looks while delivered and uncommitted; gone after the commit deleted the message"
    );
    drop(reader);
    queue.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_pointer_keeps_its_object() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let queue = TestQueue::create(&sqs, "xc-poison", false).await?;
    let dlq = TestQueue::create(&sqs, "xc-poison-dlq", false).await?;
    let (allowed, other) = (random_name("xc-allowed"), random_name("xc-other"));
    for bucket in [&allowed, &other] {
        s3.create_bucket().bucket(bucket).send().await?;
    }
    let (good, poison) = (text_body(300 * KIB, 1), text_body(300 * KIB, 2));
    extended_send(&endpoint, &queue.url, &allowed, std::slice::from_ref(&good))?;
    extended_send(&endpoint, &queue.url, &other, std::slice::from_ref(&poison))?;
    // A pointer into a bucket the spec does not list is poison: dead-lettered as the pointer.
    let dir = tempfile::tempdir()?;
    let yaml = source("xc-poison", &queue, &endpoint, &sink.url())
        .payload_buckets(&[&allowed])
        .delete_payload_objects()
        .dead_letter("poison", Sink::sqs(&dlq.url, &endpoint))
        .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    sink.wait_for_distinct(1, WITHIN).await?;
    wait_empty(&queue).await?;
    wait_objects(&s3, &allowed, 0).await.with_context(|| reader.log())?;
    wait_deleted(&reader, 1.0).await?;
    ensure!(object_count(&s3, &other).await? == 1, "the dead-lettered pointer's object was deleted");

    // The dead letter is still a pointer the Extended Client resolves to the original body.
    let out = tempfile::tempdir()?;
    let read = python(&endpoint, &["xreceive", &dlq.url, "1", out.path().to_str().unwrap_or_default()])?;
    ensure!(read["received"] == 1, "the extended client read {read} from the dead-letter queue");
    ensure!(
        std::fs::read_to_string(out.path().join("0"))? == poison,
        "the dead letter resolved to another body"
    );
    println!(
        "poison pointer dead-lettered; its object kept and read back through the dead letter; the delivered one's deleted"
    );
    drop(reader);
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}
