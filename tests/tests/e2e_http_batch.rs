//! HTTP batch mode with per-event answers, all real parts: a standalone at-least-once reader
//! (`sluice-reader --source`) on a LocalStack queue, its `http` sink in batch mode
//! (`http.batch`) pointed at a receiver served here on loopback, and an SQS dead-letter queue as
//! its `deadLetterSink`.
//!
//! The receiver takes each `application/cloudevents-batch+json` request and names 3 of every 10
//! events (those whose `seq` ends in 2, 5 or 8) in a `batchItemFailures` answer, each with a
//! reason of its own. What must hold, exactly: each of those is sent `maxAttempts` (3) times and
//! then reaches the dead-letter queue carrying the receiver's reason in `sluice-dlq-reason`;
//! each of the other 7 is sent once and never again; the source queue ends empty. The same run
//! twice side by side, at-least-once and exactlyOnce (standalone, epochs of 1 s: a message is
//! deleted only after the epoch holding it, and so the batches holding it, are done).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use bytes::Bytes;
use sluice_tests::localstack::{LocalStack, TestQueue, seq_of, sqs_client};
use sluice_tests::poll::{Check, until};
use sluice_tests::scrape::metric;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

const MESSAGES: usize = 100;
const MAX_ATTEMPTS: usize = 3;
const WITHIN: Duration = Duration::from_secs(120);

/// What the receiver saw: per event id, its seq and how often it came; the batch sizes.
#[derive(Default)]
struct Seen {
    sends: BTreeMap<String, (u64, usize)>,
    batches: Vec<usize>,
}

type Receiver = Arc<Mutex<Seen>>;

fn fails(seq: u64) -> bool {
    matches!(seq % 10, 2 | 5 | 8)
}

fn reason_for(seq: u64) -> String {
    format!("seq {seq}: price missing")
}

/// One batch: count each event, answer with the failing ones and their reasons.
async fn answer(State(seen): State<Receiver>, body: Bytes) -> impl IntoResponse {
    let events: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap_or_default();
    let mut failures = Vec::new();
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.batches.push(events.len());
    for event in &events {
        let id = event["id"].as_str().unwrap_or_default().to_owned();
        let seq = event["data"]["seq"].as_u64().unwrap_or(u64::MAX);
        seen.sends.entry(id.clone()).or_insert((seq, 0)).1 += 1;
        if fails(seq) {
            failures.push(serde_json::json!({ "itemIdentifier": id, "reason": reason_for(seq) }));
        }
    }
    axum::Json(serde_json::json!({ "batchItemFailures": failures }))
}

fn source_yaml(
    guarantee: &str,
    queue: &TestQueue,
    dlq: &TestQueue,
    endpoint: &str,
    receiver: &str,
) -> String {
    SourceYaml::bare("batches", &queue.url, endpoint)
        .wait_time(1)
        .guarantee(guarantee)
        .checkpoint_interval(1)
        .retry_fixed(MAX_ATTEMPTS as u32, 200)
        .sink("webhook", Sink::http(receiver).batch(10, 100))
        .dead_letter("dead", Sink::sqs(&dlq.url, endpoint))
        .yaml()
}

/// The dead-letter queue's messages as (seq, reason), received and deleted until `n` are in.
async fn dead_letters(dlq: &TestQueue, n: usize) -> Result<BTreeMap<u64, String>> {
    let found = Arc::new(Mutex::new(BTreeMap::new()));
    until(WITHIN, Duration::from_millis(100), || async {
        let messages = dlq.receive(Duration::from_secs(1)).await?;
        dlq.delete_messages(&messages).await?;
        let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
        for message in &messages {
            let seq = seq_of(message.body().unwrap_or_default()).context("a dead letter without a seq")?;
            let reason = message
                .message_attributes()
                .and_then(|a| a.get("sluice-dlq-reason"))
                .and_then(|v| v.string_value())
                .unwrap_or_default();
            found.insert(seq, reason.to_owned());
        }
        Ok(Check::met_if(found.len() >= n, || format!("{} of {n} dead letters", found.len())))
    })
    .await?;
    let found = found.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(found)
}

/// What one run counted.
#[derive(Debug)]
struct Counts {
    guarantee: &'static str,
    failing: usize,
    distinct: usize,
    delivered_once: usize,
    failed_thrice: usize,
    dead: BTreeMap<u64, String>,
    with_reason: usize,
    batches: usize,
    sends: usize,
    largest: usize,
    failing_seqs: Vec<u64>,
    /// The reader's own `sink_batch_requests_total` and `sink_batch_failed_items_total`.
    batch_requests_metric: f64,
    failed_items_metric: f64,
}

async fn run(endpoint: &str, guarantee: &'static str) -> Result<Counts> {
    let sqs = sqs_client(endpoint);
    let queue = TestQueue::create(&sqs, "batch", false).await?;
    let dlq = TestQueue::create(&sqs, "batch-dlq", false).await?;
    let seqs = queue.send_batch(MESSAGES).await?;
    let failing_seqs: Vec<u64> = seqs.iter().copied().filter(|&s| fails(s)).collect();

    let seen: Receiver = Arc::default();
    let app = Router::new().route("/batch", axum::routing::post(answer)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/batch", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &source_yaml(guarantee, &queue, &dlq, endpoint, &url))?;
    let dead = dead_letters(&dlq, failing_seqs.len()).await.with_context(|| reader.log())?;
    until(WITHIN, Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        Ok(Check::met_if(left == 0, || format!("{guarantee}: {left} messages left in the source queue")))
    })
    .await
    .with_context(|| reader.log())?;
    let metrics = reader.metrics().await?;
    // Stopped (SIGTERM, waited for): nothing can be sent after the counts below.
    drop(reader);
    queue.delete().await?;
    dlq.delete().await?;

    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut per_seq: BTreeMap<u64, usize> = BTreeMap::new();
    for (seq, sends) in seen.sends.values() {
        *per_seq.entry(*seq).or_default() += sends;
    }
    Ok(Counts {
        guarantee,
        failing: failing_seqs.len(),
        distinct: per_seq.len(),
        delivered_once: per_seq.iter().filter(|(s, n)| !fails(**s) && **n == 1).count(),
        failed_thrice: per_seq.iter().filter(|(s, n)| fails(**s) && **n == MAX_ATTEMPTS).count(),
        with_reason: dead.iter().filter(|(s, r)| r.contains(&reason_for(**s))).count(),
        dead,
        batches: seen.batches.len(),
        sends: seen.batches.iter().sum(),
        largest: seen.batches.iter().max().copied().unwrap_or(0),
        failing_seqs,
        batch_requests_metric: metric(&metrics, "sluice_reader_sink_batch_requests_total").unwrap_or(0.0),
        failed_items_metric: metric(&metrics, "sluice_reader_sink_batch_failed_items_total").unwrap_or(0.0),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_items_are_retried_then_dead_lettered_and_the_rest_sent_once() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (at_least_once, exactly_once) =
        tokio::join!(run(&endpoint, "atLeastOnce"), run(&endpoint, "exactlyOnce"));
    for c in [at_least_once?, exactly_once?] {
        println!(
            "{}: {MESSAGES} messages in {} batch requests (largest {} events), {} event sends: {} of {} passing events sent exactly once, {} of {} failing events sent exactly {MAX_ATTEMPTS} times; {} dead letters, {} carrying the receiver's reason; the reader's metrics: {} batch requests, {} failed items",
            c.guarantee,
            c.batches,
            c.largest,
            c.sends,
            c.delivered_once,
            MESSAGES - c.failing,
            c.failed_thrice,
            c.failing,
            c.dead.len(),
            c.with_reason,
            c.batch_requests_metric,
            c.failed_items_metric,
        );
        ensure!(c.failing == 30, "{}: 3 of every 10 of {MESSAGES} fail: {}", c.guarantee, c.failing);
        ensure!(c.distinct == MESSAGES, "{c:?}: the receiver saw {} distinct seqs", c.distinct);
        ensure!(c.delivered_once == MESSAGES - c.failing, "{c:?}");
        ensure!(c.failed_thrice == c.failing, "{c:?}");
        ensure!(c.sends == MESSAGES - c.failing + MAX_ATTEMPTS * c.failing, "{c:?}");
        ensure!(c.dead.keys().copied().collect::<Vec<_>>() == c.failing_seqs, "{c:?}");
        ensure!(c.with_reason == c.failing, "{c:?}");
        ensure!(c.largest <= 10, "{c:?}: a batch above maxEvents 10");
        ensure!(c.batch_requests_metric == c.batches as f64, "{c:?}: the reader counted other batches");
        ensure!(c.failed_items_metric == (MAX_ATTEMPTS * c.failing) as f64, "{c:?}: failed items counted");
    }
    Ok(())
}
