//! `spec.filter` with real parts: LocalStack queues, standalone `sluice-reader` processes, real
//! HTTP sinks.
//!
//! Each of three runs sends the same 1,000 mixed messages to a queue of its own: a `kind`
//! message attribute and a body that is JSON with a `region`, or plain text. The filter is
//! `attributes.kind == 'order' && body.region == 'eu'` (one attribute AND one JSON field), which
//! matches 250 of them; of the 750 others, 125 are plain text (a field of a non-JSON body reads
//! as false) and 125 are JSON without a `region`, on which `body.region` fails (an evaluation
//! error, counted apart). The three runs differ in the fate of a mismatch:
//! - `delete`: the 250 matches reach the sink, the 625 mismatches are deleted, and the 125 the
//!   expression fails on reach the SQS dead-letter sink (`onError` left to its default,
//!   `deadLetter`), each with a reason naming the expression and the missing key; the queue ends
//!   empty.
//! - `release`: the 250 matches reach the sink; the 625 mismatches are released, and the 125
//!   failures too, having no dead-letter sink (with the visibility delay that grows with their
//!   receive count); all 750 stay on the queue for another consumer, which this test then is: it
//!   drains exactly those 750, none lost.
//! - `route`, with `onError: mismatch`: the 250 matches reach one sink, the 750 others (the 125
//!   failures among them) a second (`routeTo`) sink only.
//!
//! And `delete` once more under exactlyOnce, with `onError: mismatch`, where a deleted mismatch is
//! settled like a message delivered to no sink and deleted with its epoch's commit: the 750 others,
//! failures included, are deleted, and the queue still ends empty.
//!
//! Counts are printed and checked exactly, against the sinks' own distinct message ids and the
//! queue, not the reader's word; the reader's filter metrics are printed beside them.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::poll::{Check, until};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

const MESSAGES: u64 = 1000;
const MATCHING: u64 = 250;
/// `order` messages whose JSON body has no `region`: the expression fails on them.
const MISSING_REGION: u64 = 125;
const FILTER: &str = "attributes.kind == 'order' && body.region == 'eu'";
const WITHIN: Duration = Duration::from_secs(120);

/// Message `seq`: kind and body by `seq % 4` (order/eu matches; order/us, refund/eu, an order
/// with a plain-text body and an order whose JSON body has no region do not).
fn message(seq: u64) -> (&'static str, String) {
    match seq % 4 {
        0 => ("order", format!(r#"{{"seq":{seq},"region":"eu"}}"#)),
        1 => ("order", format!(r#"{{"seq":{seq},"region":"us"}}"#)),
        2 => ("refund", format!(r#"{{"seq":{seq},"region":"eu"}}"#)),
        _ if seq % 8 == 3 => ("order", format!("plain text {seq}")),
        _ => ("order", format!(r#"{{"seq":{seq}}}"#)),
    }
}

fn matches(body: &str) -> bool {
    body.contains(r#""region":"eu""#) && message(seq(body)).0 == "order"
}

/// The sequence number in either kind of body.
fn seq(body: &str) -> u64 {
    let digits: String =
        body.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()).unwrap_or_default().to_owned();
    digits.parse().unwrap_or(u64::MAX)
}

async fn send_mixed(queue: &TestQueue) -> Result<()> {
    let messages: Vec<(&str, String)> = (0..MESSAGES).map(message).collect();
    queue.send_kinds(&messages).await
}

/// The source of these tests: one queue, long polls of 1 s, the http `sinks` (name, url) and
/// `FILTER`, whose mismatches `filter` decides.
fn source(
    name: &str,
    queue: &TestQueue,
    endpoint: &str,
    sinks: &[(&str, String)],
    filter: impl FnOnce(SourceYaml) -> SourceYaml,
) -> SourceYaml {
    let source = SourceYaml::bare(name, &queue.url, endpoint).wait_time(1);
    let source = sinks.iter().fold(source, |s, (name, url)| s.sink(name, Sink::http(url).timeout_ms(5000)));
    filter(source)
}

/// The reader's `sluice_reader_filter_messages_total` for `outcome` (0 when absent).
async fn filtered(reader: &Reader, outcome: &str) -> Result<u64> {
    let text = reader.metrics().await?;
    let wanted = format!("outcome=\"{outcome}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("sluice_reader_filter_messages_total{") && l.contains(&wanted))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

async fn errors(reader: &Reader) -> Result<u64> {
    let text = reader.metrics().await?;
    Ok(sluice_tests::scrape::metric(&text, "sluice_reader_filter_errors_total").unwrap_or(0.0) as u64)
}

/// Receives and deletes what the dead-letter queue holds until `n` arrived (bounded); answers
/// each message's `sluice-dlq-reason`.
async fn dead_letter_reasons(queue: &TestQueue, n: usize) -> Result<Vec<String>> {
    let mut reasons = Vec::new();
    for _ in 0..120 {
        let messages = queue.receive(Duration::from_secs(1)).await?;
        queue.delete_messages(&messages).await?;
        for message in &messages {
            let reason = message.message_attributes().and_then(|a| a.get("sluice-dlq-reason"));
            reasons.push(reason.and_then(|r| r.string_value()).unwrap_or_default().to_owned());
        }
        if reasons.len() >= n {
            break;
        }
    }
    Ok(reasons)
}

/// Waits until the reader counted `n` messages with `outcome`.
async fn wait_filtered(reader: &Reader, outcome: &str, n: u64) -> Result<()> {
    until(WITHIN, Duration::from_millis(250), || async {
        Ok(match filtered(reader, outcome).await {
            Ok(seen) => Check::met_if(seen >= n, || format!("{seen} of {n} {outcome} so far")),
            Err(e) => Check::NotYet(format!("no metrics yet: {e:#}")),
        })
    })
    .await
    .with_context(|| reader.log())
}

async fn wait_empty(queue: &TestQueue) -> Result<()> {
    until(WITHIN, Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        Ok(Check::met_if(left == 0, || format!("{left} messages left in the queue")))
    })
    .await
}

/// The sink received exactly the matching messages, each once.
fn only_matching(what: &str, sink: &SinkServer) -> Result<()> {
    let events = sink.events();
    let ids: BTreeSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let wrong = events.iter().filter(|e| !matches(&String::from_utf8_lossy(&e.body))).count();
    ensure!(wrong == 0, "{what}: {wrong} non-matching messages reached the matches' sink");
    ensure!(ids.len() as u64 == MATCHING, "{what}: {} distinct matches delivered, not {MATCHING}", ids.len());
    Ok(())
}

/// `delete` with the default `onError` and an SQS dead-letter sink; `exactly_once`: under
/// `guarantee: exactlyOnce` (1 s epochs, the standalone reader's own coordinator) with `onError:
/// mismatch`, where a deleted mismatch is held for its epoch and deleted when it commits.
async fn delete_run(endpoint: &str, exactly_once: bool) -> Result<()> {
    let (what, name) =
        if exactly_once { ("delete, exactlyOnce", "filter-delete-eo") } else { ("delete", "filter-delete") };
    let queue = TestQueue::create(&sqs_client(endpoint), name, false).await?;
    let dead = TestQueue::create(&sqs_client(endpoint), "filter-dlq", false).await?;
    send_mixed(&queue).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = tempfile::tempdir()?;
    let source = source(name, &queue, endpoint, &[("matches", sink.url())], |s| s.filter_deleting(FILTER));
    let yaml = if exactly_once {
        source.filter_on_error("mismatch").exactly_once(1)
    } else {
        source.dead_letter("dlq", Sink::sqs(&dead.url, endpoint))
    }
    .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    let (deleted_wanted, failed_wanted) = if exactly_once {
        (MESSAGES - MATCHING, 0)
    } else {
        (MESSAGES - MATCHING - MISSING_REGION, MISSING_REGION)
    };
    sink.wait_for_distinct(MATCHING, WITHIN).await.with_context(|| reader.log())?;
    wait_filtered(&reader, "deleted", deleted_wanted).await?;
    wait_filtered(&reader, "failed", failed_wanted).await?;
    wait_empty(&queue).await.with_context(|| reader.log())?;
    let (matched, deleted) = (filtered(&reader, "matched").await?, filtered(&reader, "deleted").await?);
    let (failed, errors) = (filtered(&reader, "failed").await?, errors(&reader).await?);
    let reasons = dead_letter_reasons(&dead, failed_wanted as usize).await?;
    println!(
        "{what}: {} delivered to the sink; reader: {matched} matched, {deleted} deleted, {failed} dead-lettered ({errors} evaluation errors); {} in the dead-letter queue, first reason: {:?}; 0 left in the queue",
        sink.stats().distinct,
        reasons.len(),
        reasons.first()
    );
    only_matching(what, &sink)?;
    ensure!(
        (matched, deleted, failed, errors) == (MATCHING, deleted_wanted, failed_wanted, MISSING_REGION),
        "{what}: counted {matched} matched, {deleted} deleted, {failed} dead-lettered, {errors} errors"
    );
    ensure!(reasons.len() as u64 == failed_wanted, "{what}: {} in the dead-letter queue", reasons.len());
    let named =
        |r: &String| r.contains(&format!("spec.filter.expression {FILTER:?}")) && r.contains("region");
    ensure!(
        reasons.iter().all(named),
        "{what}: a reason does not name the expression and the key: {reasons:?}"
    );
    drop(reader);
    sink.stop().await?;
    dead.delete().await?;
    queue.delete().await
}

async fn release_run(endpoint: &str) -> Result<()> {
    let queue = TestQueue::create(&sqs_client(endpoint), "filter-release", false).await?;
    send_mixed(&queue).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = tempfile::tempdir()?;
    // Released for 5 s at least: long enough that this reader is stopped before most come back.
    let yaml = source("filter-release", &queue, endpoint, &[("matches", sink.url())], |s| {
        s.filter_releasing(FILTER, 5)
    })
    .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    sink.wait_for_distinct(MATCHING, WITHIN).await.with_context(|| reader.log())?;
    wait_filtered(&reader, "released", MESSAGES - MATCHING - MISSING_REGION).await?;
    wait_filtered(&reader, "failed", MISSING_REGION).await?;
    let (matched, released) = (filtered(&reader, "matched").await?, filtered(&reader, "released").await?);
    let failed = filtered(&reader, "failed").await?;
    // The reader stops (handing back anything it holds); another consumer takes the rest.
    drop(reader);
    let mut others = BTreeSet::new();
    // Bounded: released messages are visible again within seconds (their delay, LocalStack's ~1 s late).
    for _ in 0..60 {
        for body in queue.drain_bodies().await? {
            others.insert(seq(&body));
        }
        if others.len() as u64 >= MESSAGES - MATCHING {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "release: {} delivered to the sink; reader: {matched} matched, {released} released, {failed} failed and released having no dead-letter sink; another consumer then drained {} distinct messages",
        sink.stats().distinct,
        others.len()
    );
    only_matching("release", &sink)?;
    let wanted: BTreeSet<u64> = (0..MESSAGES).filter(|s| s % 4 != 0).collect();
    ensure!(
        others == wanted,
        "release: the other consumer found {} of the {} non-matching messages",
        others.len(),
        wanted.len()
    );
    ensure!(
        matched == MATCHING && released >= MESSAGES - MATCHING - MISSING_REGION && failed >= MISSING_REGION,
        "release: counted {matched} matched, {released} released, {failed} failed"
    );
    sink.stop().await?;
    queue.delete().await
}

async fn route_run(endpoint: &str) -> Result<()> {
    let queue = TestQueue::create(&sqs_client(endpoint), "filter-route", false).await?;
    send_mixed(&queue).await?;
    let (sink, others) = (SinkServer::start("127.0.0.1:0").await?, SinkServer::start("127.0.0.1:0").await?);
    let dir = tempfile::tempdir()?;
    let sinks = [("matches", sink.url()), ("others", others.url())];
    let yaml = source("filter-route", &queue, endpoint, &sinks, |s| {
        s.filter_routing(FILTER, "others").filter_on_error("mismatch")
    })
    .yaml();
    let reader = Reader::start(dir.path(), &yaml)?;
    sink.wait_for_distinct(MATCHING, WITHIN).await.with_context(|| reader.log())?;
    others.wait_for_distinct(MESSAGES - MATCHING, WITHIN).await.with_context(|| reader.log())?;
    wait_empty(&queue).await?;
    let (matched, routed) = (filtered(&reader, "matched").await?, filtered(&reader, "routed").await?);
    println!(
        "route: {} delivered to the sink, {} to the routed sink; reader: {matched} matched, {routed} routed; 0 left in the queue",
        sink.stats().distinct,
        others.stats().distinct
    );
    only_matching("route", &sink)?;
    let routed_ids: BTreeSet<u64> =
        others.events().iter().map(|e| seq(&String::from_utf8_lossy(&e.body))).collect();
    let wanted: BTreeSet<u64> = (0..MESSAGES).filter(|s| s % 4 != 0).collect();
    ensure!(
        routed_ids == wanted,
        "route: the routed sink has {} of the {} non-matching messages",
        routed_ids.len(),
        wanted.len()
    );
    ensure!(
        (matched, routed) == (MATCHING, MESSAGES - MATCHING),
        "route: counted {matched} matched, {routed} routed"
    );
    drop(reader);
    sink.stop().await?;
    others.stop().await?;
    queue.delete().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_delivers_matches_and_deletes_releases_or_routes_the_rest() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let (deleted, released, routed) =
        tokio::join!(delete_run(&endpoint, false), release_run(&endpoint), route_run(&endpoint));
    deleted?;
    released?;
    routed?;
    delete_run(&endpoint, true).await
}
