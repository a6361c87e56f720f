//! End-to-end rate-limit share (issue 6), as separate processes: LocalStack, the local control plane
//! with its process runner, the operator and the reader processes it asks for.
//!
//! A source limited to 60 messages/s for the whole source, scaling 1 to 3 replicas at 1,500 messages
//! of backlog each, starts on a backlog of 5,500: the autoscaler asks for 3 readers, each must show
//! a share of 20/s on its `/metrics`, and the sink must see at most 60/s (+10%) in total (not 180/s). As the
//! backlog drains the autoscaler lowers the count to 2 (the two readers left take 30/s each) and
//! then to 1: the same reader that ran at 20/s must go to the full 60/s, and the sink must still
//! see at most 60/s, and more than a reader held to half of it could deliver.
//!
//! Why the count changes through the backlog and not by editing `spec.scaling`: any spec change
//! changes the reader's `source.yaml` and so rolls every reader pod, and the point is to see
//! running readers follow the count.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::scrape::{self, metric};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const SOURCE: &str = "rateshare";
/// The source-wide limit, messages/s.
const RATE: u32 = 60;
const REPLICAS: u32 = 3;
/// `targetMessagesPerReplica`: 3 readers above 3,000 messages, 2 down to 1,500, then 1.
const PER_REPLICA: u32 = 1_500;
/// About 40 s at 3 readers, 25 s at 2, 25 s at 1 (at `RATE`).
const BACKLOG: usize = 5_500;
const SENDERS: usize = 4;
/// How long the arrival rate at the sink is measured for.
const WINDOW: Duration = Duration::from_secs(10);
/// Wait after a share change before measuring: longer than the 1 s burst.
const SETTLE: Duration = Duration::from_secs(2);
/// Allowed deviation of the measured total from `RATE`.
const TOLERANCE: f64 = 0.10;
const GAUGE: &str = "sluice_reader_rate_limit_messages_per_second";
const RECEIVED: &str = "sluice_reader_received_messages_total";

fn source_yaml(queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .visibility_timeout(30)
        .rate_limit(RATE)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(1, REPLICAS as i32)
        .target_per_replica(PER_REPLICA)
        // Long, so the drain-rate basis never asks for more than the backlog basis does.
        .target_drain(600)
        .scale_down_stabilization(0)
        .yaml()
}

/// Each running reader of the source with its `/metrics` text, by pod name.
async fn scrape(system: &System, http: &reqwest::Client) -> Vec<(String, String)> {
    scrape::readers(system, http, SOURCE).await.into_iter().collect()
}

/// Waits until exactly `count` reader processes of the source are alive (terminating ones included:
/// a draining reader still delivers) and each shows `share` as its limit. Returns their metrics.
async fn wait_for_share(
    system: &System,
    http: &reqwest::Client,
    count: usize,
    share: f64,
    timeout: Duration,
) -> Result<Vec<(String, String)>> {
    poll::until(timeout, Duration::from_millis(500), || async {
        let alive = system.alive_readers(SOURCE).len();
        let scraped = scrape(system, http).await;
        let shares: Vec<Option<f64>> = scraped.iter().map(|(_, text)| metric(text, GAUGE)).collect();
        if alive == count && scraped.len() == count && shares.iter().all(|s| *s == Some(share)) {
            return Ok(Check::Met(scraped));
        }
        Ok(Check::NotYet(format!(
            "not {count} readers at {share}/s within {timeout:?}: {alive} alive, shares {shares:?}; logs under {}",
            system.state_dir().display()
        )))
    })
    .await
}

/// Messages per second over `WINDOW` (after `SETTLE`): in total at the sink (distinct ids), and as each reader
/// received them (its `received_messages_total`).
async fn measure(system: &System, sink: &SinkServer, http: &reqwest::Client) -> (f64, Vec<(String, f64)>) {
    // A changed rate starts with a full bucket (one burst's worth passes at once): let it go by.
    tokio::time::sleep(SETTLE).await;
    let before = scrape(system, http).await;
    let (start, arrived) = (Instant::now(), sink.stats().distinct);
    tokio::time::sleep(WINDOW).await;
    let total = (sink.stats().distinct - arrived) as f64 / start.elapsed().as_secs_f64();
    let after = scrape(system, http).await;
    let per_reader = after
        .iter()
        .filter_map(|(name, text)| {
            let (_, old) = before.iter().find(|(n, _)| n == name)?;
            Some((name.clone(), (metric(text, RECEIVED)? - metric(old, RECEIVED)?) / WINDOW.as_secs_f64()))
        })
        .collect();
    (total, per_reader)
}

/// The limit is a ceiling, held to the tolerance on a machine of any speed. From below, a loaded
/// machine may deliver less than the limit allows (52/s of 60 at a load average of 17), so the
/// floor is what tells the shares apart: more than half the limit, which neither a reader held to
/// a third (20/s) nor one held to a half (30/s) can reach.
fn within_tolerance(measured: f64) -> bool {
    measured <= f64::from(RATE) * (1.0 + TOLERANCE) && measured > f64::from(RATE) / 2.0 * (1.0 + TOLERANCE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reader_takes_its_share_of_the_source_rate_and_follows_the_replica_count() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-rate-share", false, &options).await?;
    let sends = (0..SENDERS).map(|_| queue.send_batch(BACKLOG / SENDERS));
    for sent in futures::future::join_all(sends).await {
        sent?;
    }
    println!("backlog: {BACKLOG} messages; source-wide limit {RATE}/s");
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-rate-share")).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;

    // Three readers, a third each.
    system.apply_source(&source_yaml(&queue, &endpoint, &sink.url())).await?;
    system.wait_ready_readers(SOURCE, REPLICAS as i32, Duration::from_secs(120)).await?;
    let third = f64::from(RATE.div_ceil(REPLICAS));
    let three = wait_for_share(&system, &http, REPLICAS as usize, third, Duration::from_secs(60)).await?;
    for (name, text) in &three {
        println!("{name}: {GAUGE} = {}", metric(text, GAUGE).unwrap_or(f64::NAN));
    }
    let (total, per_reader) = measure(&system, &sink, &http).await;
    println!(
        "{REPLICAS} readers: {total:.1} msgs/s at the sink over {WINDOW:?}; received per reader {per_reader:.1?}"
    );
    assert!(
        within_tolerance(total),
        "{REPLICAS} readers delivered {total:.1}/s: more than {RATE}/s +{:.0}%, or no more than half of it",
        TOLERANCE * 100.0
    );
    let started = Instant::now();
    let first: Vec<&String> = three.iter().map(|(name, _)| name).collect();

    // The backlog drains: 2 readers at half each, the same pods as before.
    let two = wait_for_share(&system, &http, 2, f64::from(RATE / 2), Duration::from_secs(120)).await?;
    for (name, text) in &two {
        println!(
            "[{:5.1}s] {name}: {GAUGE} = {}",
            started.elapsed().as_secs_f64(),
            metric(text, GAUGE).unwrap_or(f64::NAN)
        );
        assert!(first.contains(&name), "{name} is not one of the readers that ran at a third");
    }

    // Then 1 reader: the full limit again.
    let one = wait_for_share(&system, &http, 1, f64::from(RATE), Duration::from_secs(120)).await?;
    let (name, text) = &one[0];
    println!(
        "[{:5.1}s] {name}: {GAUGE} = {}",
        started.elapsed().as_secs_f64(),
        metric(text, GAUGE).unwrap_or(f64::NAN)
    );
    assert!(first.contains(&name), "{name} is not one of the readers that ran at a third");
    let (total, per_reader) = measure(&system, &sink, &http).await;
    println!("1 reader: {total:.1} msgs/s at the sink over {WINDOW:?}; received {per_reader:.1?}");
    assert!(
        within_tolerance(total),
        "1 reader delivered {total:.1}/s: more than {RATE}/s +{:.0}%, or no more than a reader held to half of it",
        TOLERANCE * 100.0
    );
    let left = queue.approximate_counts().await?;
    println!("queue after the last window: {left:?}");

    // The change was logged where an operator looks for it.
    let mut changes = 0;
    for log in system.pod_logs() {
        let text = std::fs::read_to_string(log)?;
        changes += text.lines().filter(|l| l.contains("rate limit share changed")).count();
    }
    let last_log = std::fs::read_to_string(system.pod_log(name))?;
    let last_changes: Vec<&str> =
        last_log.lines().filter(|l| l.contains("rate limit share changed")).collect();
    println!("'rate limit share changed' logged {changes} times across the readers; by {name}:");
    for line in &last_changes {
        println!("  {line}");
    }
    assert!(last_changes.len() >= 3, "{name} should have logged 60 -> 20 -> 30 -> 60");
    assert!(
        last_changes.last().is_some_and(|l| l.contains(r#""messages_per_second":60,"#)),
        "{name}'s last change was not to {RATE}/s"
    );

    drop(system);
    let stats = sink.stop().await?;
    println!(
        "sink: {} distinct, {} duplicates, {} refused",
        stats.distinct, stats.duplicates, stats.rejected
    );
    queue.delete().await?;
    Ok(())
}
