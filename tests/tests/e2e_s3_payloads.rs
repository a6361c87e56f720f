//! Payloads that live in S3, end to end against LocalStack: S3 event notifications configured on
//! a real bucket (objects uploaded with boto3), and the Amazon SQS Extended Client for Python
//! sending and reading large messages. The reader runs as its own process (`sluice-reader`), as
//! in a pod.
//!
//! Why a receiver of its own here rather than `sluice_tests::sinkserver`: it must take 50 MiB
//! bodies (axum's default limit is 2 MB) and keep the `ce-sluices3*` extension headers, and it
//! keeps only each body's SHA-256, not the body.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use aws_sdk_s3::types::{Event, NotificationConfiguration, QueueConfiguration};
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use sluice_tests::localstack::{LocalStack, TestQueue, s3_client, sqs_client};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::{Reader, python as py};

const MIB: usize = 1024 * 1024;
/// How far the reader's peak RSS (VmHWM, debug build) may rise above its peak before the objects
/// arrive, while a 50 MiB object (and a 5 MiB one, held whole) passes to an http and an s3 sink.
/// Above `streamAboveBytes` (8 MiB by default) the object is never held whole: the http sink
/// streams it, the s3 sink holds one part of about 8 MiB of its base64 line; the 5 MiB object is
/// held, and its s3 line again. Under atLeastOnce the s3 sink also buffers lines for one object
/// (up to `buffer.maxBytes`, 8 MiB by default) until the flush, so one more buffer of about 8 MiB
/// can sit beside the part. Runs measured +41 and +49 MiB (the allocator's per-thread arenas keep
/// what they freed, so the peak varies by run). What the bound tells apart is streaming from
/// holding the object: the 50 MiB object's base64 line alone is 67 MiB, and held whole, as before
/// streaming, the same run rises by more than twice the object (BENCHMARKS.md, "Fetching S3
/// objects"). So the bound sits under one base64 copy of the object, not at the last run's figure.
const RSS_GROWTH_BOUND_MIB: u64 = 64;

/// The reader's peak RSS before and after the objects passed, in MiB.
struct PeakRss {
    before: u64,
    after: u64,
}

impl PeakRss {
    fn growth(&self) -> u64 {
        self.after.saturating_sub(self.before)
    }

    fn check(&self) -> Result<()> {
        let (before, after, growth) = (self.before, self.after, self.growth());
        ensure!(
            growth < RSS_GROWTH_BOUND_MIB,
            "reader peak RSS rose {growth} MiB ({before} to {after} MiB), bound {RSS_GROWTH_BOUND_MIB} MiB"
        );
        Ok(())
    }
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn random_name(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// One accepted POST: its headers of interest and its body's digest.
#[derive(Clone, Debug)]
struct Seen {
    id: String,
    headers: BTreeMap<String, String>,
    sha: String,
    len: usize,
    at: Instant,
}

#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// An object to delete when the first request for it arrives (then answered 503).
    trap: Arc<Mutex<Option<Trap>>>,
}

/// `key` in `bucket`, deleted while the reader is delivering it.
struct Trap {
    s3: aws_sdk_s3::Client,
    bucket: String,
    key: String,
}

impl Receiver {
    async fn start() -> Result<(Self, String)> {
        let receiver = Self::default();
        let app =
            Router::new().fallback(accept).layer(DefaultBodyLimit::disable()).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/events", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((receiver, url))
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn wait_for(&self, distinct: usize, timeout: Duration) -> Result<Vec<Seen>> {
        let started = Instant::now();
        loop {
            let seen = self.seen();
            let ids: std::collections::BTreeSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
            if ids.len() >= distinct {
                return Ok(seen);
            }
            if started.elapsed() > timeout {
                bail!(
                    "the http sink saw {} distinct events within {timeout:?}, expected {distinct}",
                    ids.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn accept(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let headers: BTreeMap<String, String> = headers
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("ce-"))
        .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let id = headers.get("ce-id").cloned().unwrap_or_default();
    let key = headers.get("ce-sluices3key").map(|k| percent_decode(k)).unwrap_or_default();
    let seen = Seen { id, headers, sha: sha(&body), len: body.len(), at: Instant::now() };
    receiver.seen.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    let sprung = {
        let mut trap = receiver.trap.lock().unwrap_or_else(|e| e.into_inner());
        if trap.as_ref().is_some_and(|t| t.key == key) { trap.take() } else { None }
    };
    if let Some(trap) = sprung {
        let deleted = trap.s3.delete_object().bucket(&trap.bucket).key(&trap.key).send().await;
        return if deleted.is_ok() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
    }
    StatusCode::OK
}

/// Waits until `queue` holds nothing, visible or in flight.
async fn wait_empty(queue: &TestQueue, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        let counts = queue.approximate_counts().await?;
        if counts.total() == 0 {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("{} still holds {counts:?} after {timeout:?}", queue.name);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every JSON line the s3 sink wrote under `bucket`, once the number of lines reaches `lines`.
async fn s3_sink_lines(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    lines: usize,
) -> Result<Vec<serde_json::Value>> {
    let started = Instant::now();
    loop {
        let mut found = Vec::new();
        let listing = s3.list_objects_v2().bucket(bucket).send().await?;
        for object in listing.contents() {
            let body = s3.get_object().bucket(bucket).key(object.key().unwrap_or_default()).send().await?;
            let bytes = body.body.collect().await?.into_bytes();
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                found.push(serde_json::from_slice(line)?);
            }
        }
        if found.len() >= lines || started.elapsed() > Duration::from_secs(60) {
            return Ok(found);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A line's body bytes (`body` text or `bodyBase64`).
fn line_body(line: &serde_json::Value) -> Result<Vec<u8>> {
    if let Some(text) = line["body"].as_str() {
        return Ok(text.as_bytes().to_vec());
    }
    let encoded = line["bodyBase64"].as_str().context("a line with neither body nor bodyBase64")?;
    Ok(aws_smithy_types::base64::decode(encoded)?)
}

/// Deterministic bytes that are not UTF-8 (so the s3 sink's base64 path is the one tested).
fn object_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes);
    if let Some(first) = bytes.first_mut() {
        *first = 0xff;
    }
    bytes
}

struct Notified {
    bucket: String,
    queue: TestQueue,
}

/// A bucket whose create and remove events go to a fresh queue (S3 sends its TestEvent first).
async fn notified_bucket(endpoint: &str, prefix: &str) -> Result<Notified> {
    let (sqs, s3) = (sqs_client(endpoint), s3_client(endpoint));
    let queue = TestQueue::create(&sqs, prefix, false).await?;
    let bucket = random_name(prefix);
    s3.create_bucket().bucket(&bucket).send().await?;
    let config = QueueConfiguration::builder()
        .queue_arn(queue.arn().await?)
        .events(Event::from("s3:ObjectCreated:*"))
        .events(Event::from("s3:ObjectRemoved:*"))
        .build()?;
    s3.put_bucket_notification_configuration()
        .bucket(&bucket)
        .notification_configuration(NotificationConfiguration::builder().queue_configurations(config).build())
        .send()
        .await?;
    Ok(Notified { bucket, queue })
}

/// An SqsSource reading `queue_url` with long polls of 1 s.
fn source_reading(name: &str, queue_url: &str, endpoint: &str) -> SourceYaml {
    SourceYaml::bare(name, queue_url, endpoint).wait_time(1)
}

/// A source of S3 notifications from `queue`: each object to the `webhook` http sink, what cannot
/// be read to `dlq`.
fn notification_source(
    name: &str,
    queue: &TestQueue,
    endpoint: &str,
    http: &str,
    dlq: &TestQueue,
) -> SourceYaml {
    source_reading(name, &queue.url, endpoint)
        .visibility_timeout(30)
        .payload_format("s3Notification")
        .payload_s3(endpoint)
        .sink("webhook", Sink::http(http).timeout_ms(60_000))
        .dead_letter("unreadable", Sink::sqs(&dlq.url, endpoint))
}

/// Uploads `objects` with boto3 into a notified bucket while a reader runs, and checks each
/// arrives byte-identical, once, at both sinks; an object deleted before the reader fetches it
/// goes to the dead-letter queue with its reason, its removal event is delivered as metadata,
/// and the TestEvent is deleted without delivery. Answers the reader's peak RSS in MiB.
/// `stream_above`: `spec.payload.streamAboveBytes` (absent: its default).
async fn objects_arrive_intact(
    sizes: &[usize],
    exactly_once: bool,
    stream_above: Option<usize>,
) -> Result<PeakRss> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let Notified { bucket, queue } = notified_bucket(&endpoint, "s3n").await?;
    let dlq = TestQueue::create(&sqs, "s3n-dlq", false).await?;
    let out_bucket = random_name("s3n-out");
    s3.create_bucket().bucket(&out_bucket).send().await?;
    let dir = tempfile::tempdir()?;

    // Deleted before any reader runs: its create event names an object that is gone.
    let gone = "gone + deleted é.bin";
    let gone_file = dir.path().join("gone");
    std::fs::write(&gone_file, b"short-lived")?;
    py(&endpoint, &["upload", &bucket, gone, gone_file.to_str().unwrap_or_default()])?;
    py(&endpoint, &["delete", &bucket, gone])?;

    let keys = ["empty file.bin", "plus+sign 1k.bin", "ünïcødé dir/fünf+mib.bin", "big 50 MiB+ü.bin"];
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut upload = vec!["upload".to_owned(), bucket.clone()];
    for (i, (&size, key)) in sizes.iter().zip(keys).enumerate() {
        let bytes = object_bytes(size, i as u64 + 1);
        let path = dir.path().join(format!("object-{i}"));
        std::fs::write(&path, &bytes)?;
        expected.insert(key.to_owned(), sha(&bytes));
        upload.push(key.to_owned());
        upload.push(path.to_string_lossy().into_owned());
    }

    let (receiver, http) = Receiver::start().await?;
    // Both sinks: the http sink and an s3 sink writing to `out_bucket`.
    let mut source = notification_source("payloads", &queue, &endpoint, &http, &dlq)
        .sink("archive", Sink::s3_bucket(&out_bucket, &endpoint));
    if let Some(bytes) = stream_above {
        source = source.stream_above(bytes);
    }
    if exactly_once {
        source = source.exactly_once(1);
    }
    let yaml = source.yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    // Started, and past the TestEvent and the deleted object's events (already queued).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = reader.peak_rss_mib()?;
    let args: Vec<&str> = upload.iter().map(String::as_str).collect();
    py(&endpoint, &args)?;

    // Every object, plus the removal of the deleted one (its create event is dead-lettered).
    let want = expected.len() + 1;
    let seen = receiver.wait_for(want, Duration::from_secs(240)).await?;
    wait_empty(&queue, Duration::from_secs(60)).await?;
    let peak = PeakRss { before, after: reader.peak_rss_mib()? };
    let seen_after = receiver.seen();
    ensure!(
        seen_after.len() == want,
        "http sink: {} requests for {want} events: {seen_after:#?}",
        seen_after.len()
    );

    let mut delivered: BTreeMap<String, String> = BTreeMap::new();
    for event in &seen {
        let key = event.headers.get("ce-sluices3key").context("an event without ce-sluices3key")?;
        let key = percent_decode(key);
        let name = event.headers.get("ce-sluices3eventname").cloned().unwrap_or_default();
        if name.starts_with("ObjectRemoved") {
            ensure!(key == gone && event.len == 0, "removal of {key}: {} bytes", event.len);
            continue;
        }
        ensure!(event.headers.contains_key("ce-sluices3etag"), "no ETag header for {key}");
        delivered.insert(key, event.sha.clone());
    }
    ensure!(
        delivered == expected,
        "http sink bodies by key (sha256):\n{delivered:#?}\nexpected\n{expected:#?}"
    );

    let lines = s3_sink_lines(&s3, &out_bucket, want).await?;
    let mut archived: BTreeMap<String, String> = BTreeMap::new();
    for line in &lines {
        let key = line["attributes"]["sluice-s3key"].as_str().context("a line without sluice-s3key")?;
        ensure!(line.get("truncated").is_none(), "a truncated line for {key}: {}", line["truncated"]);
        if line["attributes"]["sluice-s3eventname"].as_str().unwrap_or_default().starts_with("ObjectRemoved")
        {
            continue;
        }
        ensure!(archived.insert(key.to_owned(), sha(&line_body(line)?)).is_none(), "{key} archived twice");
    }
    ensure!(archived == expected, "s3 sink bodies by key (sha256):\n{archived:#?}\nexpected\n{expected:#?}");

    let reason = the_dead_letter(&dlq, gone).await?;
    ensure!(reason.contains("NoSuchKey"), "dead-letter reason: {reason}");
    println!("dead-letter reason: {reason}");
    println!(
        "{} objects ({} bytes in all) delivered once each to http and s3 (exactlyOnce: {exactly_once}); reader peak RSS {} MiB before the objects, {} MiB after (+{} MiB)",
        expected.len(),
        sizes.iter().sum::<usize>(),
        peak.before,
        peak.after,
        peak.growth()
    );
    drop(reader);
    queue.delete().await?;
    dlq.delete().await?;
    Ok(peak)
}

/// The reason of the one message in `dlq`, which must name the object `key`.
async fn the_dead_letter(dlq: &TestQueue, key: &str) -> Result<String> {
    let dead = dlq.receive(Duration::from_secs(5)).await?;
    ensure!(dead.len() == 1, "dead-letter queue holds {} messages, expected the one of {key}", dead.len());
    let attributes = dead[0].message_attributes().context("a dead letter without attributes")?;
    let text =
        |name: &str| attributes.get(name).and_then(|a| a.string_value()).unwrap_or_default().to_owned();
    ensure!(text("sluice-s3key") == key, "dead letter names {:?}", text("sluice-s3key"));
    Ok(text("sluice-dlq-reason"))
}

/// `ce-` header values percent-encode space, `"`, `%` and non-ASCII (CloudEvents HTTP binding).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notified_objects_up_to_50_mib_arrive_byte_identical_at_least_once() -> Result<()> {
    objects_arrive_intact(&[0, 1024, 5 * MIB, 50 * MIB], false, None).await?.check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notified_objects_up_to_50_mib_arrive_byte_identical_exactly_once() -> Result<()> {
    objects_arrive_intact(&[0, 1024, 5 * MIB, 50 * MIB], true, None).await?.check()
}

/// The reader's peak RSS with the 50 MiB object held whole (`streamAboveBytes` above it, the
/// reader as it was before streaming) next to streamed (the default), in one run. A benchmark:
/// `cargo nextest run -p sluice-tests --test e2e_s3_payloads -E 'test(bench_peak_rss)' --run-ignored only --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures for BENCHMARKS.md"]
async fn bench_peak_rss_held_and_streamed() -> Result<()> {
    let sizes = [0, 1024, 5 * MIB, 50 * MIB];
    let held = objects_arrive_intact(&sizes, false, Some(64 * MIB)).await?;
    let streamed = objects_arrive_intact(&sizes, false, None).await?;
    println!(
        "50 MiB object to http + s3, at-least-once: peak RSS held whole {} MiB (+{} MiB), streamed {} MiB (+{} MiB)",
        held.after,
        held.growth(),
        streamed.after,
        streamed.growth()
    );
    Ok(())
}

/// An object above `streamAboveBytes` deleted after intake checked it, while the http sink
/// delivers it: the sink's retry reads it again, finds it gone, and the message goes to the
/// dead-letter queue with that reason (nothing is lost, nothing is delivered twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_object_deleted_during_delivery_is_dead_lettered_with_its_reason() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let Notified { bucket, queue } = notified_bucket(&endpoint, "s3del").await?;
    let dlq = TestQueue::create(&sqs, "s3del-dlq", false).await?;
    let dir = tempfile::tempdir()?;
    let key = "deleted while streaming.bin";
    let path = dir.path().join("object");
    std::fs::write(&path, object_bytes(9 * MIB, 42))?;
    let (receiver, http) = Receiver::start().await?;
    *receiver.trap.lock().unwrap_or_else(|e| e.into_inner()) =
        Some(Trap { s3: s3.clone(), bucket: bucket.clone(), key: key.to_owned() });
    let yaml = notification_source("deleted", &queue, &endpoint, &http, &dlq).yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    py(&endpoint, &["upload", &bucket, key, path.to_str().unwrap_or_default()])?;

    receiver.wait_for(1, Duration::from_secs(60)).await?;
    wait_empty(&queue, Duration::from_secs(90)).await?;
    let reason = the_dead_letter(&dlq, key).await?;
    ensure!(reason.starts_with("GetObject") && reason.contains("NoSuchKey"), "dead-letter reason: {reason}");
    // The deletion sends its own removal event (delivered as metadata); the object's creation
    // was sent once, whole, and answered 503; its retry found the object gone.
    let created: Vec<usize> = receiver
        .seen()
        .iter()
        .filter(|s| s.headers.get("ce-sluices3eventname").is_some_and(|n| n.starts_with("ObjectCreated")))
        .map(|s| s.len)
        .collect();
    ensure!(created == [9 * MIB], "the http sink saw these creation requests (bytes): {created:?}");
    println!("streamed object deleted during delivery: 1 attempt (503), then dead-lettered: {reason}");
    drop(reader);
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}

/// An object above `streamAboveBytes` that a route sends to an `sqs` sink, which needs the whole
/// body: refused, and the dead-letter queue gets the notification with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_object_for_an_sqs_sink_is_refused_into_the_dead_letter_queue() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let Notified { bucket, queue } = notified_bucket(&endpoint, "s3ref").await?;
    let (forward, dlq) = (
        TestQueue::create(&sqs, "s3ref-out", false).await?,
        TestQueue::create(&sqs, "s3ref-dlq", false).await?,
    );
    let dir = tempfile::tempdir()?;
    let key = "too big for sqs.bin";
    let path = dir.path().join("object");
    std::fs::write(&path, object_bytes(2 * MIB, 43))?;
    let yaml = source_reading("refused", &queue.url, &endpoint)
        .payload_format("s3Notification")
        .stream_above(MIB)
        .payload_s3(&endpoint)
        .sink("forward", Sink::sqs(&forward.url, &endpoint))
        .dead_letter("unreadable", Sink::sqs(&dlq.url, &endpoint))
        .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    py(&endpoint, &["upload", &bucket, key, path.to_str().unwrap_or_default()])?;
    let started = Instant::now();
    let reason = loop {
        match the_dead_letter(&dlq, key).await {
            Ok(reason) => break reason,
            Err(e) if started.elapsed() > Duration::from_secs(60) => return Err(e),
            Err(_) => {}
        }
    };
    ensure!(
        reason.contains("above spec.payload.streamAboveBytes")
            && reason.contains("sink forward cannot stream it"),
        "dead-letter reason: {reason}"
    );
    wait_empty(&queue, Duration::from_secs(60)).await?;
    ensure!(forward.receive(Duration::from_secs(1)).await?.is_empty(), "the sqs sink forwarded the object");
    println!("streamed object routed to an sqs sink: dead-lettered: {reason}");
    drop(reader);
    for queue in [queue, forward, dlq] {
        queue.delete().await?;
    }
    Ok(())
}

/// Bodies of text the Python client can send (it sends strings).
fn text_body(len: usize, seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.alphanumeric()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_client_messages_are_delivered_as_payloads_and_offloads_read_back() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let source = TestQueue::create(&sqs, "xc-src", false).await?;
    let forward = TestQueue::create(&sqs, "xc-out", false).await?;
    let bucket = random_name("xc");
    s3.create_bucket().bucket(&bucket).send().await?;
    let dir = tempfile::tempdir()?;
    let bodies = [text_body(300 * 1024, 7), text_body(3 * MIB, 8)];
    let mut files = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let path = dir.path().join(format!("body-{i}"));
        std::fs::write(&path, body)?;
        files.push(path.to_string_lossy().into_owned());
    }
    let mut args = vec!["xsend", source.url.as_str(), bucket.as_str()];
    args.extend(files.iter().map(String::as_str));
    py(&endpoint, &args)?;

    let (receiver, http) = Receiver::start().await?;
    let yaml = source_reading("extended", &source.url, &endpoint)
        .payload_s3(&endpoint)
        .sink("webhook", Sink::http(&http))
        .sink("forward", Sink::sqs(&forward.url, &endpoint).offload(&bucket))
        .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    let seen = receiver.wait_for(2, Duration::from_secs(120)).await?;
    let mut got: Vec<String> = seen.iter().map(|s| s.sha.clone()).collect();
    let mut want: Vec<String> = bodies.iter().map(|b| sha(b.as_bytes())).collect();
    got.sort();
    want.sort();
    ensure!(got == want, "http sink got {seen:#?}");
    ensure!(
        seen.iter().all(|s| !s.headers.contains_key("ce-sqsextendedpayloadsize")),
        "the size attribute is the pointer's, not the payload's: {seen:#?}"
    );
    wait_empty(&source, Duration::from_secs(60)).await?;

    let out = tempfile::tempdir()?;
    let read = py(&endpoint, &["xreceive", &forward.url, "2", out.path().to_str().unwrap_or_default()])?;
    ensure!(read["received"] == 2, "the extended client read {read}");
    let mut read_back: Vec<String> = (0..2)
        .map(|i| std::fs::read(out.path().join(i.to_string())).map(|b| sha(&b)))
        .collect::<Result<_, _>>()?;
    read_back.sort();
    ensure!(read_back == want, "the extended client read back other bodies");
    println!("extended client: 300 KiB and 3 MiB delivered as payloads; both offloads read back intact");
    drop(reader);
    source.delete().await?;
    forward.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_messages_pass_every_sink_and_the_dead_letter_route_unchanged() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let source = TestQueue::create(&sqs, "mib-src", false).await?;
    let forward = TestQueue::create(&sqs, "mib-out", false).await?;
    let dlq = TestQueue::create(&sqs, "mib-dlq", false).await?;
    let bucket = random_name("mib");
    s3.create_bucket().bucket(&bucket).send().await?;
    // SQS's limit is 1 MiB for body and attributes together; the dead-letter route adds three
    // attributes of its own, so the body leaves them room.
    let body = text_body(MIB - 2048, 9);
    let poison = format!("not json {}", text_body(MIB - 2048 - 9, 10));
    let valid = format!("\"{}\"", &body[..body.len() - 2]);
    for text in [&valid, &poison] {
        sqs.send_message().queue_url(&source.url).message_body(text.as_str()).send().await?;
    }
    let (receiver, http) = Receiver::start().await?;
    let yaml = source_reading("onemib", &source.url, &endpoint)
        .payload_format("json")
        .sink("webhook", Sink::http(&http))
        .sink("forward", Sink::sqs(&forward.url, &endpoint))
        .sink("archive", Sink::s3_bucket(&bucket, &endpoint))
        .sink("stderr", Sink::log())
        .dead_letter("poison", Sink::sqs(&dlq.url, &endpoint))
        .yaml();
    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &yaml)?;
    let seen = receiver.wait_for(1, Duration::from_secs(60)).await?;
    wait_empty(&source, Duration::from_secs(60)).await?;
    let want = sha(valid.as_bytes());
    ensure!(seen.len() == 1 && seen[0].sha == want, "http sink: {seen:#?}");
    let forwarded = forward.receive(Duration::from_secs(5)).await?;
    ensure!(
        forwarded.len() == 1 && forwarded[0].body() == Some(valid.as_str()),
        "sqs sink forwarded {} messages, or another body",
        forwarded.len()
    );
    let lines = s3_sink_lines(&s3, &bucket, 1).await?;
    ensure!(lines.len() == 1 && sha(&line_body(&lines[0])?) == want, "s3 sink lines: {}", lines.len());
    let dead = dlq.receive(Duration::from_secs(5)).await?;
    ensure!(
        dead.len() == 1 && dead[0].body() == Some(poison.as_str()),
        "dead-letter queue: {} messages, or another body",
        dead.len()
    );
    println!(
        "a {} byte message reached http, sqs, s3 and log unchanged; a {} byte poison message the dead-letter queue",
        valid.len(),
        poison.len()
    );
    drop(reader);
    for queue in [source, forward, dlq] {
        queue.delete().await?;
    }
    Ok(())
}

/// Objects and bytes per second for `objects` objects of 1 MiB: the reader (S3 notifications
/// fetched, POSTed to an http sink) next to a plain boto3 loop doing GetObject + POST to the same
/// kind of receiver, side by side, `ROUNDS` rounds, medians printed. A benchmark, not a check:
/// `cargo nextest run -p sluice-tests --test e2e_s3_payloads --run-ignored only --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures for BENCHMARKS.md"]
async fn bench_fetch_throughput_next_to_boto3() -> Result<()> {
    const OBJECTS: usize = 100;
    const ROUNDS: usize = 3;
    let endpoint = LocalStack::ensure().await?;
    let dir = tempfile::tempdir()?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..ROUNDS {
        let Notified { bucket, queue } = notified_bucket(&endpoint, "bench").await?;
        let mut upload = vec!["upload".to_owned(), bucket.clone()];
        for i in 0..OBJECTS {
            let path = dir.path().join(format!("bench-{i}"));
            if round == 0 {
                std::fs::write(&path, object_bytes(MIB, 100 + i as u64))?;
            }
            upload.push(format!("bench/{i}"));
            upload.push(path.to_string_lossy().into_owned());
        }
        let args: Vec<&str> = upload.iter().map(String::as_str).collect();
        py(&endpoint, &args)?;

        // boto3: GetObject + POST, one object after the other, as a plain consumer loop does.
        let (baseline_sink, baseline_url) = Receiver::start().await?;
        let count = OBJECTS.to_string();
        let plain = py(&endpoint, &["baseline", &bucket, "bench/", &count, &baseline_url])?;
        let seconds = plain["seconds"].as_f64().context("baseline seconds")?;
        ensure!(
            baseline_sink.seen().len() == OBJECTS,
            "the baseline delivered {}",
            baseline_sink.seen().len()
        );
        theirs.push(seconds);

        // The reader: from its start to the last object at the sink (start-up included).
        let (sink, http) = Receiver::start().await?;
        let dlq = TestQueue::create(&sqs_client(&endpoint), "bench-dlq", false).await?;
        let yaml = notification_source("bench", &queue, &endpoint, &http, &dlq).yaml();
        let started = Instant::now();
        let reader = Reader::start(dir.path(), &yaml)?;
        let seen = sink.wait_for(OBJECTS, Duration::from_secs(300)).await?;
        let last = seen.iter().map(|s| s.at).max().context("no deliveries")?;
        ours.push(last.duration_since(started).as_secs_f64());
        let cpu = reader_cpu_seconds(&reader)?;
        drop(reader);
        println!(
            "round {round}: sluice-reader {:.2} s ({cpu:.2} CPU-s), boto3 loop {seconds:.2} s for {OBJECTS} x 1 MiB",
            ours[round]
        );
        queue.delete().await?;
        dlq.delete().await?;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    let rate = |s: f64| (OBJECTS as f64 / s, OBJECTS as f64 / s);
    let ((o_objs, o_mib), (t_objs, t_mib)) = (rate(ours), rate(theirs));
    println!(
        "median of {ROUNDS}: sluice-reader {o_objs:.1} objects/s ({o_mib:.1} MiB/s); boto3 GetObject+POST loop {t_objs:.1} objects/s ({t_mib:.1} MiB/s); ratio {:.2}",
        theirs / ours
    );
    Ok(())
}

/// User + system CPU seconds the reader has used (from /proc/PID/stat, at 100 ticks per second).
fn reader_cpu_seconds(reader: &Reader) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", reader.pid()))?;
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(ticks as f64 / 100.0)
}
