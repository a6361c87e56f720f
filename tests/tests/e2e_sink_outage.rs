//! A sink outage never costs a healthy message a receive: a standalone at-least-once reader
//! (`sluice-reader --source`) on a queue whose RedrivePolicy moves a message to a real dead-letter
//! queue after 3 receives, with an HTTP sink that is down from the start and comes back.
//!
//! Three outages side by side, one queue and one reader each: connections refused (nothing
//! listens on the port), every event answered 503, and every request left unanswered (the
//! reader's `timeoutMs` fires). The outage lasts `SLUICE_OUTAGE_SECONDS` (default 45: long
//! enough that releasing failed messages with the old visibility backoff of 1, 2, 4 s would have
//! spent all 3 receives of every message; `SLUICE_OUTAGE_SECONDS=300` runs the 5-minute outage).
//!
//! What must hold: nothing in the dead-letter queue; all 500 messages delivered after the outage;
//! each message received exactly once (the reader received 500 messages in all for 500 distinct
//! deliveries, so each ApproximateReceiveCount is 1, within the bound of 2); and while the sink's
//! circuit was open the pollers did not receive (a handful of ReceiveMessage calls a minute at
//! most; the counts are printed).
//!
//! And the same rule under exactlyOnce: an S3 sink whose bucket is missing for
//! `SLUICE_BUCKET_OUTAGE_SECONDS` (default 45) and then created; nothing reaches the dead-letter
//! queue, and every message is committed exactly once.
//!
//! And with attribute routes, where a message goes to two sinks and only one is down: the held
//! messages go round again to the sink that is down only, so the healthy one receives each message
//! exactly once however long the outage lasts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use axum::http::StatusCode;
use sluice_tests::localstack::{LocalStack, QueueOptions, Redrive, TestQueue, s3_client, seq_of, sqs_client};
use sluice_tests::poll::{Check, until};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const MESSAGES: usize = 500;
const MAX_RECEIVE_COUNT: u32 = 3;
/// Generous bounds for a busy 2-core machine: the circuit opening, and the backlog after.
const OPENS_WITHIN: Duration = Duration::from_secs(60);
const DELIVERED_WITHIN: Duration = Duration::from_secs(180);

/// How the sink is down.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// Nothing listens: connection refused.
    Refused,
    /// Every event answered 503.
    Unavailable,
    /// Connections accepted, requests never answered.
    Silent,
}

fn outage_seconds() -> u64 {
    std::env::var("SLUICE_OUTAGE_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(45)
}

fn source_yaml(name: &str, queue: &TestQueue, endpoint: &str, port: u16) -> String {
    SourceYaml::bare(name, &queue.url, endpoint)
        .wait_time(1)
        .sink("webhook", Sink::http(&format!("http://127.0.0.1:{port}/")).timeout_ms(2000))
        .yaml()
}

/// A server that takes connections and never answers, until `stop`.
async fn silent(listener: TcpListener, stop: CancellationToken) {
    let mut held = Vec::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => {
                if let Ok((socket, _)) = accepted {
                    held.push(socket);
                }
            }
        }
    }
}

/// One family's value from `reader`'s metrics (0 when absent).
/// Waits until `reader`'s sink circuit is open (its admin server may not be up yet at first).
async fn wait_open(reader: &Reader, what: &str) -> Result<()> {
    until(OPENS_WITHIN, Duration::from_millis(250), || async {
        Ok(match reader.metric("sluice_reader_sink_circuit_state").await {
            Ok(state) => Check::met_if(state >= 1.0, || format!("{what}: the circuit is {state}, not open")),
            Err(e) => Check::NotYet(format!("{what}: no metrics yet: {e:#}")),
        })
    })
    .await
    .with_context(|| reader.log())
}

/// Figures one outage run printed and checked.
#[derive(Debug)]
struct Run {
    outage: Outage,
    receives_while_open: f64,
    receives_in_all: f64,
    received_messages: f64,
    delivered: u64,
    duplicates: u64,
    dead_lettered: usize,
}

async fn run(endpoint: &str, outage: Outage, seconds: u64) -> Result<Run> {
    let sqs = sqs_client(endpoint);
    let dlq = TestQueue::create(&sqs, "outage-dlq", false).await?;
    let redrive = Redrive { dead_letter_arn: dlq.arn().await?, max_receive_count: MAX_RECEIVE_COUNT };
    let options =
        QueueOptions { visibility_timeout: Some(10), redrive: Some(redrive), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "outage", false, &options).await?;
    queue.send_batch(MESSAGES).await?;

    // The port the sink will answer on, held by a socket that is bound but not listening: a
    // connection to it is refused, and no other process on the machine can take the port.
    let reserved = tokio::net::TcpSocket::new_v4()?;
    reserved.bind("127.0.0.1:0".parse()?)?;
    let port = reserved.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let mut reserved = Some(reserved);
    let stop_silent = CancellationToken::new();
    let mut sink = None;
    if !matches!(outage, Outage::Refused) {
        drop(reserved.take());
    }
    match outage {
        Outage::Refused => {}
        Outage::Unavailable => {
            let server = SinkServer::start(&addr).await?;
            server.refuse(StatusCode::SERVICE_UNAVAILABLE, "");
            sink = Some(server);
        }
        Outage::Silent => {
            let listener = TcpListener::bind(&addr).await?;
            tokio::spawn(silent(listener, stop_silent.clone()));
        }
    }
    let dir = tempfile::tempdir()?;
    let name = format!("outage-{}", format!("{outage:?}").to_lowercase());
    let reader = Reader::start(dir.path(), &source_yaml(&name, &queue, endpoint, port))?;
    let started = Instant::now();

    // The circuit opens within seconds, and the pollers stop receiving.
    wait_open(&reader, &format!("{outage:?}")).await?;
    let opened_after = started.elapsed();
    let calls_at_open = reader.metric("sluice_reader_receive_calls_total").await?;
    let rest = Duration::from_secs(seconds).saturating_sub(started.elapsed());
    tokio::time::sleep(rest).await;
    let calls_at_end = reader.metric("sluice_reader_receive_calls_total").await?;
    let receives_while_open = calls_at_end - calls_at_open;
    let open_minutes = (seconds as f64 - opened_after.as_secs_f64()).max(1.0) / 60.0;
    ensure!(
        receives_while_open <= 5.0 * open_minutes.ceil(),
        "{outage:?}: {receives_while_open} ReceiveMessage calls in {open_minutes:.1} min while the circuit was open"
    );
    let dead_during = dlq.approximate_counts().await?.total();
    ensure!(dead_during == 0, "{outage:?}: {dead_during} messages in the DLQ during the outage");

    // The sink comes back.
    let sink = match (outage, sink) {
        (Outage::Unavailable, Some(server)) => {
            server.accept_all();
            server
        }
        _ => {
            stop_silent.cancel();
            drop(reserved.take());
            until(Duration::from_secs(10), Duration::from_millis(100), || async {
                Ok(match SinkServer::start(&addr).await {
                    Ok(server) => Check::Met(server),
                    Err(e) => Check::NotYet(format!("cannot bind {addr} again: {e:#}")),
                })
            })
            .await?
        }
    };
    let stats =
        sink.wait_for_distinct(MESSAGES as u64, DELIVERED_WITHIN).await.with_context(|| reader.log())?;
    until(Duration::from_secs(60), Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        Ok(Check::met_if(left == 0, || format!("{outage:?}: {left} messages left in the queue")))
    })
    .await?;
    let received_messages = reader.metric("sluice_reader_received_messages_total").await?;
    let receives_in_all = reader.metric("sluice_reader_receive_calls_total").await?;
    let dead_lettered = dlq.drain_count().await?;
    drop(reader);
    sink.stop().await?;
    queue.delete().await?;
    dlq.delete().await?;
    Ok(Run {
        outage,
        receives_while_open,
        receives_in_all,
        received_messages,
        delivered: stats.distinct,
        duplicates: stats.duplicates,
        dead_lettered,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_outage_holds_messages_and_pauses_receiving() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let seconds = outage_seconds();
    let (refused, unavailable, silent) = tokio::join!(
        run(&endpoint, Outage::Refused, seconds),
        run(&endpoint, Outage::Unavailable, seconds),
        run(&endpoint, Outage::Silent, seconds),
    );
    for run in [refused?, unavailable?, silent?] {
        println!(
            "{:?} outage of {seconds} s: {} of {MESSAGES} delivered ({} duplicates), {} in the DLQ, {} messages received in all, {} ReceiveMessage calls in all, {} while the circuit was open",
            run.outage,
            run.delivered,
            run.duplicates,
            run.dead_lettered,
            run.received_messages,
            run.receives_in_all,
            run.receives_while_open
        );
        ensure!(run.dead_lettered == 0, "{run:?}: messages reached the DLQ");
        ensure!(run.delivered == MESSAGES as u64, "{run:?}: not every message was delivered");
        // Every receive brings a message once: 500 received for 500 delivered means no message
        // was received twice (ApproximateReceiveCount 1 each, within the bound of 2).
        ensure!(
            run.received_messages <= MESSAGES as f64,
            "{run:?}: some message was received more than once"
        );
    }
    Ok(())
}

/// How long the exactly-once run's bucket is missing: `SLUICE_BUCKET_OUTAGE_SECONDS`, default 45
/// (the 2 minutes: `SLUICE_BUCKET_OUTAGE_SECONDS=120`).
fn bucket_outage_seconds() -> u64 {
    std::env::var("SLUICE_BUCKET_OUTAGE_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(45)
}

/// Each `seq` in the committed objects under `bucket`, with how often it appears.
async fn committed_seqs(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<BTreeMap<u64, u32>> {
    let mut seen = BTreeMap::new();
    let mut token = None;
    loop {
        let page = s3.list_objects_v2().bucket(bucket).set_continuation_token(token).send().await?;
        for object in page.contents() {
            let key = object.key().unwrap_or_default();
            let body = s3.get_object().bucket(bucket).key(key).send().await?.body.collect().await?;
            for line in String::from_utf8_lossy(&body.into_bytes()).lines().filter(|l| !l.trim().is_empty()) {
                let record: serde_json::Value =
                    serde_json::from_str(line).with_context(|| format!("{key}: not a JSON line: {line}"))?;
                let seq = seq_of(record["body"].as_str().unwrap_or_default())
                    .with_context(|| format!("{key}: no seq in {line}"))?;
                *seen.entry(seq).or_insert(0) += 1;
            }
        }
        token = page.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            return Ok(seen);
        }
    }
}

/// exactlyOnce to S3 with the bucket missing from the start: the epochs' pre-commits fail and are
/// retried, the sink's circuit opens and receiving pauses, the messages stay held and invisible;
/// once the bucket exists every message is committed exactly once and nothing reaches the
/// queue's dead-letter queue (RedrivePolicy maxReceiveCount 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_to_a_missing_bucket_holds_until_it_exists() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (sqs, s3) = (sqs_client(&endpoint), s3_client(&endpoint));
    let seconds = bucket_outage_seconds();
    let dlq = TestQueue::create(&sqs, "eo-outage-dlq", false).await?;
    let redrive = Redrive { dead_letter_arn: dlq.arn().await?, max_receive_count: MAX_RECEIVE_COUNT };
    let options =
        QueueOptions { visibility_timeout: Some(10), redrive: Some(redrive), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "eo-outage", false, &options).await?;
    queue.send_batch(MESSAGES).await?;
    let bucket = format!("eo-outage-{:016x}", fastrand::u64(..));
    let yaml = SourceYaml::bare("eo-outage", &queue.url, &endpoint)
        .wait_time(1)
        .exactly_once(1)
        .sink("archive", Sink::s3(&bucket, "out/", &endpoint))
        .yaml();
    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &yaml)?;
    let started = Instant::now();
    wait_open(&reader, "exactlyOnce").await?;
    let calls_at_open = reader.metric("sluice_reader_receive_calls_total").await?;
    tokio::time::sleep(Duration::from_secs(seconds).saturating_sub(started.elapsed())).await;
    let receives_while_open = reader.metric("sluice_reader_receive_calls_total").await? - calls_at_open;
    let dead_during = dlq.approximate_counts().await?.total();
    ensure!(dead_during == 0, "{dead_during} messages in the DLQ while the bucket was missing");

    s3.create_bucket().bucket(&bucket).send().await.context("CreateBucket")?;
    until(DELIVERED_WITHIN, Duration::from_secs(1), || async {
        let committed = committed_seqs(&s3, &bucket).await?.len();
        let left = queue.approximate_counts().await?.total();
        Ok(Check::met_if(committed >= MESSAGES && left == 0, || {
            format!("{committed} of {MESSAGES} committed, {left} left in the queue")
        }))
    })
    .await
    .with_context(|| reader.log())?;
    // A late duplicate commit would show up here.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = committed_seqs(&s3, &bucket).await?;
    let received = reader.metric("sluice_reader_received_messages_total").await?;
    let duplicates: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let lost = (0..MESSAGES as u64).filter(|s| !seen.contains_key(s)).count();
    let dead_lettered = dlq.drain_count().await?;
    println!(
        "exactlyOnce, bucket missing {seconds} s: {} of {MESSAGES} committed, {} duplicates, {lost} lost, {dead_lettered} in the DLQ, {received} messages received in all, {receives_while_open} ReceiveMessage calls while the circuit was open",
        seen.len(),
        duplicates.len()
    );
    ensure!(dead_lettered == 0, "{dead_lettered} messages reached the DLQ");
    ensure!(duplicates.is_empty(), "duplicates in the committed output: {duplicates:?}");
    ensure!(lost == 0, "{lost} messages lost");
    drop(reader);
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}

/// Messages of the routed run: every one goes to the sink `all`, the even ones (attribute
/// `kind: order`) to the sink `orders` too.
const ROUTED_MESSAGES: usize = 100;
/// Probes of `orders` while it is down (each a round of held messages) before it comes back.
const ROUTED_PROBES: f64 = 3.0;

/// `ROUTED_MESSAGES` messages, `kind` `order` for even bodies and `refund` for odd ones.
fn kinds() -> Vec<(&'static str, String)> {
    (0..ROUTED_MESSAGES)
        .map(|seq| (if seq % 2 == 0 { "order" } else { "refund" }, format!("message {seq}")))
        .collect()
}

/// Attribute routes and one sink down: `all` takes every message, `orders` (routed on `kind:
/// order`) answers 503 until its circuit has probed it `ROUTED_PROBES` times, each probe a round
/// of held messages. A held message goes again only to the sinks that have not taken it, so
/// `all` receives each of the messages exactly once, and `orders` each order once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_message_held_for_one_sink_reaches_the_healthy_sink_once() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "routed-outage", false).await?;
    queue.send_kinds(&kinds()).await?;
    let (all, orders) = (SinkServer::start("127.0.0.1:0").await?, SinkServer::start("127.0.0.1:0").await?);
    orders.refuse(StatusCode::SERVICE_UNAVAILABLE, "");
    let yaml = SourceYaml::bare("routed-outage", &queue.url, &endpoint)
        .wait_time(1)
        .sink("all", Sink::http(&all.url()).timeout_ms(2000))
        .sink("orders", Sink::http(&orders.url()).timeout_ms(2000).route("kind", &["order"]))
        .yaml();
    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &yaml)?;
    wait_open(&reader, "routed").await?;
    until(DELIVERED_WITHIN, Duration::from_millis(250), || async {
        let text = reader.metrics().await?;
        let probes = text
            .lines()
            .filter(|l| l.starts_with("sluice_reader_sink_circuit_transitions_total{"))
            .filter(|l| l.contains("sink=\"orders\"") && l.contains("to=\"half_open\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        Ok(Check::met_if(probes >= ROUTED_PROBES, || format!("{probes} probes of orders so far")))
    })
    .await
    .with_context(|| reader.log())?;
    let during = all.stats();
    orders.accept_all();
    orders
        .wait_for_distinct(ROUTED_MESSAGES as u64 / 2, DELIVERED_WITHIN)
        .await
        .with_context(|| reader.log())?;
    all.wait_for_distinct(ROUTED_MESSAGES as u64, DELIVERED_WITHIN).await.with_context(|| reader.log())?;
    until(Duration::from_secs(60), Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        Ok(Check::met_if(left == 0, || format!("{left} messages left in the queue")))
    })
    .await?;
    drop(reader);
    let (all_stats, orders_stats) = (all.stop().await?, orders.stop().await?);
    println!(
        "routed, orders down for {ROUTED_PROBES} probes: all took {} of {ROUTED_MESSAGES} during the outage ({} duplicates) and {} in the end ({} duplicates); orders refused {} requests, then took {} distinct ({} duplicates)",
        during.distinct,
        during.duplicates,
        all_stats.distinct,
        all_stats.duplicates,
        orders_stats.refused,
        orders_stats.distinct,
        orders_stats.duplicates
    );
    ensure!(during.distinct > 0, "no message reached the healthy sink during the outage");
    ensure!(all_stats.duplicates == 0, "the healthy sink received {} duplicates", all_stats.duplicates);
    ensure!(
        all_stats.distinct == ROUTED_MESSAGES as u64,
        "the healthy sink has {} distinct",
        all_stats.distinct
    );
    ensure!(
        orders_stats.distinct == ROUTED_MESSAGES as u64 / 2,
        "orders has {} distinct",
        orders_stats.distinct
    );
    queue.delete().await
}
