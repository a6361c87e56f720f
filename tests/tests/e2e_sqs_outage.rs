//! An outage of the reader's way to SQS costs no message a receive: a standalone at-least-once
//! reader (`sluice-reader --source`) on a queue whose RedrivePolicy moves a message to a real
//! dead-letter queue after 3 receives, its queue endpoint (`spec.queues[].endpoint`) a TCP path to
//! LocalStack that is cut mid-stream (every connection refused, open ones dropped) and restored on
//! the same port.
//!
//! While SQS cannot be reached the reader can neither receive, delete nor extend visibility. What
//! it holds stays held: delivered, its deletes retried until SQS answers (a delete given up would
//! let the message come back when its visibility lapses: a receive spent and a duplicate). The
//! outage lasts `SLUICE_SQS_OUTAGE_SECONDS` (default 20), shorter than what is left of any held
//! message's visibility (60 s, extended at half), so no visibility lapses: SQS's own clock is the
//! one thing a reader cannot hold back.
//!
//! What must hold: nothing in the dead-letter queue; every message delivered exactly once, on its
//! first receive (the log sink's `receive_count`) unless that receive's answer was lost to the
//! cut; the queue empty at the end; and the fault showed: receive errors counted and the reader not
//! ready during the outage (`spec.delivery.unreadyAfterSeconds: 5`), ready again after it.
//!
//! The one receive an outage may cost: a ReceiveMessage SQS answered while the path was being cut.
//! SQS counted that receive and made its messages invisible, and the answer never reached the
//! reader, so they come back after their visibility timeout with a receive count of 2. No consumer
//! can prevent that (it is the network's, at the moment of the cut); what tells it from a receive
//! the reader spent is that the reader never saw those messages before: each is delivered once, at
//! its second receive, and there are at most ten of them per receive on the wire at the cut. A
//! delete the reader gave up instead shows as a duplicate (delivered at receive 1, again at 2).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use sluice_tests::localstack::{LocalStack, QueueOptions, Redrive, TestQueue, sqs_client};
use sluice_tests::outage::Outage;
use sluice_tests::poll::{Check, until};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

const MESSAGES: usize = 300;
const MAX_RECEIVE_COUNT: u32 = 3;
const UNREADY_AFTER_SECONDS: u32 = 5;
const VISIBILITY_SECONDS: u32 = 60;
/// Delivered before the path is cut: the reader is mid-stream, holding messages.
const CUT_AFTER: u64 = 60;
/// `receive.pollers`: a reader grows to at most twice this many, each with one receive on the wire,
/// which bounds the receives whose answers a cut can lose.
const POLLERS: u32 = 4;
/// Each delivery takes this long at the sink, so the stream outlasts the start of the outage.
const SINK_LATENCY: Duration = Duration::from_millis(100);
/// Generous bounds for a busy 2-core machine.
const WITHIN: Duration = Duration::from_secs(120);

fn outage_seconds() -> u64 {
    std::env::var("SLUICE_SQS_OUTAGE_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20)
}

/// The sum of `sluice_reader_errors_total` series of one stage.
async fn stage_errors(reader: &Reader, stage: &str) -> Result<f64> {
    let text = reader.metrics().await?;
    let label = format!("stage=\"{stage}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("sluice_reader_errors_total") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_outage_holds_messages_and_costs_no_receive() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let seconds = outage_seconds();
    let dlq = TestQueue::create(&sqs, "sqs-outage-dlq", false).await?;
    let redrive = Redrive { dead_letter_arn: dlq.arn().await?, max_receive_count: MAX_RECEIVE_COUNT };
    let options = QueueOptions {
        visibility_timeout: Some(VISIBILITY_SECONDS),
        redrive: Some(redrive),
        ..QueueOptions::default()
    };
    let queue = TestQueue::create_with(&sqs, "sqs-outage", false, &options).await?;
    queue.send_batch(MESSAGES).await?;

    let mut path = Outage::start(&endpoint).await?;
    let sink = SinkServer::start_with_latency("127.0.0.1:0", SINK_LATENCY).await?;
    let yaml = SourceYaml::bare("sqs-outage", &queue.url, &path.endpoint())
        .wait_time(1)
        .pollers(POLLERS)
        .visibility_timeout(VISIBILITY_SECONDS)
        .unready_after(UNREADY_AFTER_SECONDS)
        .sink("webhook", Sink::http(&sink.url()).concurrency(4))
        .sink("audit", Sink::log())
        .yaml();
    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &yaml)?;
    sink.wait_for_distinct(CUT_AFTER, WITHIN).await.with_context(|| reader.log())?;

    path.cut().await?;
    let cut_at = Instant::now();
    let held_at_cut = reader.metric("sluice_reader_held_messages").await?;
    // The fault shows: receives fail, and after unreadyAfterSeconds the reader is not ready.
    until(WITHIN, Duration::from_millis(500), || async {
        let failed = stage_errors(&reader, "receive").await?;
        let ready = reader.metric("sluice_reader_ready").await?;
        Ok(Check::met_if(failed > 0.0 && ready == 0.0, || format!("receive errors {failed}, ready {ready}")))
    })
    .await
    .with_context(|| reader.log())?;
    let unready_after = cut_at.elapsed();
    tokio::time::sleep(Duration::from_secs(seconds).saturating_sub(cut_at.elapsed())).await;
    let dead_during = dlq.approximate_counts().await?.total();
    let receive_errors = stage_errors(&reader, "receive").await?;
    ensure!(dead_during == 0, "{dead_during} messages in the DLQ during the outage");

    path.restore().await?;
    let stats = sink.wait_for_distinct(MESSAGES as u64, WITHIN).await.with_context(|| reader.log())?;
    until(WITHIN, Duration::from_millis(300), || async {
        let left = queue.approximate_counts().await?.total();
        let ready = reader.metric("sluice_reader_ready").await?;
        Ok(Check::met_if(left == 0 && ready == 1.0, || {
            format!("{left} messages left in the queue, ready {ready}")
        }))
    })
    .await
    .with_context(|| reader.log())?;

    let counts = reader.receive_counts("audit");
    let ids: Vec<String> = sink.events().into_iter().map(|e| e.id).collect();
    let mut histogram: BTreeMap<u32, usize> = BTreeMap::new();
    for id in ids.iter().collect::<std::collections::BTreeSet<_>>() {
        *histogram.entry(counts.get(id).copied().unwrap_or(0)).or_insert(0) += 1;
    }
    let dead_lettered = dlq.drain_count().await?;
    println!(
        "SQS unreachable for {seconds} s with {held_at_cut} held (not ready after {:.1} s, {receive_errors} receive errors): {} of {MESSAGES} delivered ({} duplicates), {dead_lettered} in the DLQ, receive counts {histogram:?}",
        unready_after.as_secs_f64(),
        stats.distinct,
        stats.duplicates
    );
    ensure!(dead_lettered == 0, "{dead_lettered} messages reached the DLQ\n{}", reader.log());
    ensure!(stats.distinct == MESSAGES as u64, "{} of {MESSAGES} delivered", stats.distinct);
    ensure!(stats.duplicates == 0, "{} duplicates at the sink\n{}", stats.duplicates, reader.log());
    ensure!(
        histogram.keys().all(|c| *c == 1 || *c == 2),
        "receive counts {histogram:?} (0: no log line for it)\n{}",
        reader.log()
    );
    // Messages at receive 2: only those whose first receive's answer the cut lost, never seen before.
    let log = reader.log();
    let second: Vec<&String> = counts.iter().filter(|(_, c)| **c == 2).map(|(id, _)| id).collect();
    let seen_before = second
        .iter()
        .filter(|id| log.lines().filter(|l| l.contains("sink=audit") && l.contains(id.as_str())).count() > 1)
        .count();
    ensure!(seen_before == 0, "{seen_before} messages delivered at receive 1 and again at 2\n{log}");
    ensure!(
        second.len() <= (2 * POLLERS * 10) as usize,
        "{} messages at receive 2: more than the {} receives on the wire at the cut could hold\n{log}",
        second.len(),
        2 * POLLERS
    );
    if !second.is_empty() {
        println!(
            "{} messages came back at receive 2, each delivered once: the answer of a receive on the wire at the cut was lost",
            second.len()
        );
    }
    drop(reader);
    sink.stop().await?;
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}
