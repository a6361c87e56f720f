//! End-to-end: an at-least-once source scales on its readers' measured drain rate.
//!
//! Behind a sink that answers each event after a fixed latency, a reader drains at most its sink
//! concurrency over that latency. With `targetMessagesPerReplica` far above the backlog, depth alone
//! would keep one replica; only the drain rate in the readers' reports (written to their lease
//! ConfigMaps by the at-least-once reporter) can call for more. The scaler's decision must name
//! the drain rate, its replica count must be the one the reported rate calls for
//! (ceil(backlog / (rate x targetDrainSeconds))), the Deployment and the reader processes must reach
//! it, and every message must reach the sink.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use sluice_crds::SqsSource;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::SourceYaml;
use sluice_tests::system::System;

const SOURCE: &str = "rated";
const MESSAGES: usize = 1_200;
const MAX_REPLICAS: i32 = 8;
const TARGET_DRAIN_SECONDS: u32 = 30;
const SINK_LATENCY: Duration = Duration::from_millis(200);
const BOUND: Duration = Duration::from_secs(6 * 60);

fn source_yaml(queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    SourceYaml::behind_slow_sink(SOURCE, &queue.url, endpoint, sink, MAX_REPLICAS)
        .target_drain(TARGET_DRAIN_SECONDS)
        .yaml()
}

/// A drain-rate reason, `backlog B needs R replicas (readers drain X msg/s each, too slow to
/// clear it within Ts)`, as (B, R, X, T).
fn parse_drain_reason(reason: &str) -> Option<(f64, i32, f64, f64)> {
    let words: Vec<&str> = reason.split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w);
    let backlog = words.get(at("backlog")? + 1)?.parse().ok()?;
    let replicas = words.get(at("needs")? + 1)?.parse().ok()?;
    let rate = words.get(at("drain")? + 1)?.parse().ok()?;
    let within = words.get(at("within")? + 1)?.trim_end_matches(['s', ')']).parse().ok()?;
    Some((backlog, replicas, rate, within))
}

/// The replica counts the reason's rate calls for, allowing for its rounding to 0.1 msg/s.
fn called_for(backlog: f64, rate: f64, within: f64) -> (i32, i32) {
    let at = |r: f64| (backlog / (r * within)).ceil() as i32;
    (at(rate + 0.05), at((rate - 0.05).max(0.01)))
}

#[derive(Default)]
struct Seen {
    drain_reason: Option<String>,
    peak_replicas: i32,
    peak_processes: usize,
    reported_rates: Vec<u64>,
}

async fn watch(system: &System, sink: &SinkServer, start: Instant, seen: &mut Seen) -> Result<()> {
    let sources: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let mut last_line = String::new();
    loop {
        let now = start.elapsed().as_secs_f64();
        let status = sources.get(SOURCE).await?.status.unwrap_or_default();
        let replicas = system.reader_replicas(SOURCE).await?.unwrap_or(-1);
        let processes = system.running_readers(SOURCE).len();
        seen.peak_replicas = seen.peak_replicas.max(replicas);
        seen.peak_processes = seen.peak_processes.max(processes);
        let rates: Vec<u64> = status.readers.iter().map(|r| r.drain_millis_per_second).collect();
        seen.reported_rates.extend(rates.iter().filter(|r| **r > 0));
        let reason = status.last_scale_reason.clone().unwrap_or_default();
        if seen.drain_reason.is_none() && reason.contains("readers drain") {
            seen.drain_reason = Some(reason.clone());
        }
        let delivered = sink.stats().distinct;
        let line =
            format!("replicas {replicas}, {processes} processes, reported msg/s x1000 {rates:?}; {reason}");
        if line != last_line {
            println!("[{now:6.1}s] {delivered} delivered; {line}");
            last_line = line;
        }
        if delivered >= MESSAGES as u64 {
            return Ok(());
        }
        if start.elapsed() > BOUND {
            bail!(
                "not drained within {BOUND:?}: {delivered} delivered; logs under {}",
                system.state_dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_least_once_source_scales_on_its_reported_drain_rate() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-autoscale-rate", false, &options).await?;
    let sink = SinkServer::start_with_latency("127.0.0.1:0", SINK_LATENCY).await?;
    let system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-autoscale-rate"))
            .await?;
    system.apply_source(&source_yaml(&queue, &endpoint, &sink.url())).await?;
    system.wait_ready_readers(SOURCE, 1, Duration::from_secs(60)).await?;

    queue.send_batch(MESSAGES).await?;
    let start = Instant::now();
    println!("sent {MESSAGES} messages; sink latency {SINK_LATENCY:?}, concurrency 2 per reader");
    let mut seen = Seen::default();
    watch(&system, &sink, start, &mut seen).await?;

    let events: Api<Event> = Api::namespaced(system.client.clone(), &system.namespace);
    let notes: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(SOURCE))
        .filter(|e| e.reason.as_deref() == Some("ScaledUp"))
        .filter_map(|e| e.note)
        .collect();
    println!("ScaledUp events: {notes:?}");
    let stats = sink.stats();
    println!(
        "sink: {} distinct, {} duplicates; peak replicas {}",
        stats.distinct, stats.duplicates, seen.peak_replicas
    );

    assert!(
        !seen.reported_rates.is_empty(),
        "no at-least-once reader reported a drain rate in status.readers"
    );
    let Some(reason) = seen.drain_reason else {
        bail!("no scale decision named the drain rate; events {notes:?}");
    };
    assert!(
        notes.iter().any(|n| n.contains("readers drain")),
        "no ScaledUp event names the drain rate: {notes:?}"
    );
    let Some((backlog, replicas, rate, within)) = parse_drain_reason(&reason) else {
        bail!("cannot read the decision: {reason}");
    };
    let (low, high) = called_for(backlog, rate, within);
    println!(
        "decision: {reason}\n  backlog {backlog} / ({rate} msg/s x {within} s) calls for {low}..={high} replicas; \
         depth alone calls for 1"
    );
    assert!(
        (low..=high).contains(&replicas),
        "the decision's count {replicas} is not what the rate calls for"
    );
    assert!(replicas > 1, "the drain rate called for no more than depth does");
    let wanted = replicas.min(MAX_REPLICAS);
    assert!(seen.peak_replicas >= wanted, "spec.replicas peaked at {} below {wanted}", seen.peak_replicas);
    assert!(seen.peak_processes >= wanted as usize, "only {} reader processes ran", seen.peak_processes);
    assert_eq!(stats.distinct, MESSAGES as u64, "messages lost at the sink");

    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}

#[test]
fn the_drain_reason_is_read_back() {
    let reason =
        "backlog 1200 needs 4 replicas (readers drain 10.2 msg/s each, too slow to clear it within 30s)";
    assert_eq!(parse_drain_reason(reason), Some((1200.0, 4, 10.2, 30.0)));
    assert_eq!(called_for(1200.0, 10.0, 30.0), (4, 5));
}
