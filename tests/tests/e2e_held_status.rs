//! End to end, as separate processes (LocalStack, the local control plane with its process runner,
//! the operator, two reader processes): what each reader holds reaches the source's status.
//!
//! Two atLeastOnce readers work a 1,000-message backlog into a slow HTTP sink (each delivery
//! 200 ms, 4 at a time per reader, so about 20 messages/s each) with a held ceiling of 60
//! messages. Each reader reports what it holds in its lease ConfigMap when it changed (at most
//! every 5 s) and at least every 30 s; the operator reads the reports every 5 s into
//! `status.readers` and `status.held`. The test shows: both readers appear with messages held
//! within a report interval and an operator tick of the backlog's arrival; every figure sampled
//! from the status stays within the ceiling (samples above the bound in force, held before it
//! shrank, are printed); every message is delivered; and once the queue is drained the status
//! shows nothing held.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Api;
use sluice_crds::{ReaderHeld, SqsSource, SqsSourceStatus};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const SOURCE: &str = "heldstatus";
const REPLICAS: usize = 2;
const BACKLOG: usize = 1_000;
const SENDERS: usize = 5;
const CEILING: u64 = 60;
/// The reader's longest gap between reports, one operator tick, and slack for the runner.
const REPORTED_WITHIN: Duration = Duration::from_secs(30 + 5 + 10);

fn source_yaml(queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .pollers(4)
        .visibility_timeout(30)
        .held_max_messages(CEILING as u32)
        .sink("webhook", Sink::http(sink).timeout_ms(5000).concurrency(4))
        .replicas(REPLICAS as i32, REPLICAS as i32)
        .yaml()
}

async fn status(api: &Api<SqsSource>) -> Result<SqsSourceStatus> {
    Ok(api.get(SOURCE).await?.status.unwrap_or_default())
}

fn line(r: &ReaderHeld) -> String {
    let ms = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v} ms"));
    format!(
        "{}: held {} messages / {} bytes, bound {} / {} bytes, {} handed off, wait mean {} max {}, {} AWS requests per 1,000 messages",
        r.pod,
        r.held_messages,
        r.held_bytes,
        r.bound_messages,
        r.bound_bytes,
        r.handed_off,
        ms(r.wait_mean_milliseconds),
        ms(r.wait_max_milliseconds),
        r.aws_requests_per_thousand_messages.map_or_else(|| "-".to_owned(), |c| c.to_string())
    )
}

/// Per reader across status samples: samples, the most held, samples above the bound in force.
#[derive(Debug, Default)]
struct Seen {
    samples: u64,
    peak: u64,
    over_bound: Vec<(u64, u64)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sink_shows_what_each_reader_holds_in_status_within_the_bound() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs_client(&endpoint), "e2e-heldstatus", false, &options).await?;
    let sink = SinkServer::start_with_latency("127.0.0.1:0", Duration::from_millis(200)).await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-heldstatus");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&sluice_tests::system::bin_dir(), &dir).await?;
    system.start_operator()?;
    system.apply_source(&source_yaml(&queue, &endpoint, &sink.url())).await?;
    system.wait_ready_readers(SOURCE, REPLICAS as i32, Duration::from_secs(60)).await?;
    let sends = (0..SENDERS).map(|_| queue.send_batch(BACKLOG / SENDERS));
    for sent in futures::future::join_all(sends).await {
        sent?;
    }
    let arrived = Instant::now();
    let api: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);

    // Both readers shown holding messages.
    let first = loop {
        let s = status(&api).await?;
        if s.readers.len() == REPLICAS && s.readers.iter().all(|r| r.held_messages > 0) {
            break s;
        }
        if arrived.elapsed() > REPORTED_WITHIN {
            bail!(
                "status.readers does not show {REPLICAS} readers holding messages {REPORTED_WITHIN:?} after the backlog arrived: {:?}; logs under {}",
                s.readers,
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "status.readers shows both readers holding messages {:.1} s after the backlog arrived:",
        arrived.elapsed().as_secs_f64()
    );
    for r in &first.readers {
        println!("  {}", line(r));
    }
    let held = first.held.clone().expect("totals beside the readers");
    println!(
        "  status.held: {} messages, {} bytes, at most {} per reader",
        held.messages, held.bytes, held.max_messages_per_reader
    );
    assert_eq!(held.messages, first.readers.iter().map(|r| r.held_messages).sum::<u64>());

    // Sample the status until every message is delivered.
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut last_printed: BTreeMap<String, ReaderHeld> = BTreeMap::new();
    let start = Instant::now();
    while sink.stats().distinct < BACKLOG as u64 {
        if start.elapsed() > Duration::from_secs(180) {
            bail!("{} of {BACKLOG} delivered in 180 s; logs under {}", sink.stats().distinct, dir.display());
        }
        for r in status(&api).await?.readers {
            assert!(
                r.held_messages <= CEILING,
                "{} holds {} messages, above the ceiling {CEILING}",
                r.pod,
                r.held_messages
            );
            assert!(r.bound_messages <= CEILING, "{}: bound {} above the ceiling", r.pod, r.bound_messages);
            let s = seen.entry(r.pod.clone()).or_default();
            s.samples += 1;
            s.peak = s.peak.max(r.held_messages);
            if r.held_messages > r.bound_messages {
                s.over_bound.push((r.held_messages, r.bound_messages));
            }
            if last_printed.get(&r.pod) != Some(&r) {
                println!("  {:5.1} s  {}", arrived.elapsed().as_secs_f64(), line(&r));
                last_printed.insert(r.pod.clone(), r);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stats = sink.stats();
    println!(
        "all {BACKLOG} delivered {:.1} s after the backlog arrived ({} duplicates)",
        arrived.elapsed().as_secs_f64(),
        stats.duplicates
    );
    for (pod, s) in &seen {
        println!(
            "{pod}: {} status samples, held at most {} (ceiling {CEILING}); {} samples above the bound in force: {:?}",
            s.samples,
            s.peak,
            s.over_bound.len(),
            s.over_bound
        );
    }
    assert_eq!(seen.len(), REPLICAS, "both readers were listed: {seen:?}");

    // Drained: the status shows nothing held.
    let drained = Instant::now();
    loop {
        let s = status(&api).await?;
        if s.held.as_ref().is_some_and(|h| h.messages == 0) {
            println!(
                "status.held shows 0 messages {:.1} s after the last delivery",
                drained.elapsed().as_secs_f64()
            );
            for r in &s.readers {
                println!("  {}", line(r));
            }
            // What the source costs: each reader's requests per delivered message over its last
            // 60 s, which still covers the drain. A receive or a delete carries at most 10
            // messages, so 200 per 1,000 is the floor; these partly filled batches of 4 cost more.
            let cost = s.held.as_ref().and_then(|h| h.aws_requests_per_thousand_messages);
            println!("status.held: {cost:?} AWS requests per 1,000 messages");
            let cost = cost.context("status.held shows the source's requests per message after a drain")?;
            assert!((200..5_000).contains(&cost), "requests per 1,000 messages {cost} outside 200..5000");
            for r in &s.readers {
                let own = r.aws_requests_per_thousand_messages;
                assert!(own.is_some_and(|c| c >= 200), "{}: requests per 1,000 messages {own:?}", r.pod);
            }
            break;
        }
        if drained.elapsed() > REPORTED_WITHIN {
            bail!("status.held still shows {:?} {REPORTED_WITHIN:?} after the last delivery", s.held);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
