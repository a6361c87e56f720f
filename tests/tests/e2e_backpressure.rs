//! End-to-end backpressure, as separate processes: LocalStack, the local control plane with its
//! process runner, the operator and three reader processes.
//!
//! A reader holds only what it can deliver soon (its bound: the measured drain or its rate-limit
//! share over a 2 s horizon, at most half the checkpoint interval under exactlyOnce; it starts at one
//! receive batch per poller and at most doubles a second). Two runs show it:
//! - three readers starting together on a 1,500-message backlog with a slow sink (each delivery
//!   200 ms, 4 at a time per reader, so 20 messages/s per reader): none takes more than half the
//!   backlog and all three deliver;
//! - the same three under exactlyOnce with a 50 messages/s source-wide limit: each holds no more
//!   than its share's bound (17/s over the 2 s horizon: 34 messages), sampled from
//!   `/metrics` every 250 ms, and epochs keep committing while the backlog drains (how long each
//!   took from opening to commit is printed: a figure, not a timed assertion). (The bound in force may sit lower, following the measured drain; what was
//!   held when it shrank stays until it settles, so samples above it are printed, not failed.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sluice_protocol::{Checkpoint, checkpoint_configmap_name};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::scrape::{self, metric};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;
use tokio_util::sync::CancellationToken;

const REPLICAS: usize = 3;
const BACKLOG: usize = 1_500;
const SENDERS: usize = 5;
const HELD: &str = "sluice_reader_held_messages";
const BOUND: &str = "sluice_reader_held_bound_messages";
const RECEIVED: &str = "sluice_reader_received_messages_total";
const DELIVERED: &str = "sluice_reader_delivered_messages_total";
const SHARE: &str = "sluice_reader_rate_limit_messages_per_second";

fn bin_dir() -> PathBuf {
    sluice_tests::system::bin_dir()
}

/// An SqsSource of `REPLICAS` fixed readers reading `queue` into the HTTP sink at `sink` (4
/// deliveries at a time per reader).
fn source(name: &str, queue: &TestQueue, endpoint: &str, sink: &str) -> SourceYaml {
    SourceYaml::new(name, &queue.url, endpoint)
        .pollers(4)
        .visibility_timeout(30)
        .sink("webhook", Sink::http(sink).timeout_ms(5000).concurrency(4))
        .replicas(REPLICAS as i32, REPLICAS as i32)
}

/// Per reader, across samples: the most held, the bound in force then, and any sample above the
/// bound in force (held before it shrank).
#[derive(Debug, Default, Clone)]
struct HeldSamples {
    samples: u64,
    peak: f64,
    bound_at_peak: f64,
    over_bound: Vec<(f64, f64)>,
}

/// Samples every reader's held messages and bound every 250 ms while `counting` says so.
fn sample_held(
    system: Arc<System>,
    source: &'static str,
    counting: Arc<std::sync::atomic::AtomicBool>,
    stop: CancellationToken,
) -> (Arc<Mutex<BTreeMap<String, HeldSamples>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<BTreeMap<String, HeldSamples>>> = Arc::default();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("client");
        while !stop.is_cancelled() {
            let counted = counting.load(std::sync::atomic::Ordering::SeqCst);
            for (pod, text) in scrape::readers(&system, &http, source).await {
                let (Some(held), Some(bound)) = (metric(&text, HELD), metric(&text, BOUND)) else { continue };
                if !counted {
                    continue;
                }
                let mut seen = seen.lock().unwrap();
                let s = seen.entry(pod).or_default();
                s.samples += 1;
                if held > s.peak {
                    (s.peak, s.bound_at_peak) = (held, bound);
                }
                if held > bound {
                    s.over_bound.push((held, bound));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    (out, task)
}

async fn fill(queue: &TestQueue) -> Result<()> {
    let sends = (0..SENDERS).map(|_| queue.send_batch(BACKLOG / SENDERS));
    for sent in futures::future::join_all(sends).await {
        sent?;
    }
    Ok(())
}

async fn wait_delivered(sink: &SinkServer, system: &System, timeout: Duration) -> Result<Duration> {
    let start = Instant::now();
    while sink.stats().distinct < BACKLOG as u64 {
        if start.elapsed() > timeout {
            bail!(
                "{} of {BACKLOG} delivered within {timeout:?}; logs under {}",
                sink.stats().distinct,
                system.state_dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_readers_starting_together_share_a_backlog_behind_a_slow_sink() -> Result<()> {
    const SOURCE: &str = "bp-fair";
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-bp-fair", false, &options).await?;
    fill(&queue).await?;
    let sink = SinkServer::start_with_latency("127.0.0.1:0", Duration::from_millis(200)).await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-backpressure-fair");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&bin_dir(), &dir).await?;
    system.start_operator()?;
    system.apply_source(&source(SOURCE, &queue, &endpoint, &sink.url()).yaml()).await?;
    let system = Arc::new(system);
    let (stop, counting) = (CancellationToken::new(), Arc::new(std::sync::atomic::AtomicBool::new(true)));
    let (held, sampler) = sample_held(system.clone(), SOURCE, counting, stop.clone());

    let took = wait_delivered(&sink, &system, Duration::from_secs(240)).await?;
    stop.cancel();
    let _ = sampler.await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let last = scrape::readers(&system, &http, SOURCE).await;
    println!(
        "backlog {BACKLOG}, sink 200 ms per delivery, concurrency 4 per reader: all delivered in {took:.1?}"
    );
    let mut received = Vec::new();
    for (pod, text) in &last {
        let (r, d) = (metric(text, RECEIVED).unwrap_or(0.0), metric(text, DELIVERED).unwrap_or(0.0));
        let h = held.lock().unwrap().get(pod).cloned().unwrap_or_default();
        println!(
            "{pod}: received {r} ({:.0}% of the backlog), delivered {d}; held at most {} (bound then {}) over {} samples",
            100.0 * r / BACKLOG as f64,
            h.peak,
            h.bound_at_peak,
            h.samples
        );
        received.push((pod.clone(), r, d));
    }
    let stats = sink.stats();
    println!("sink: {} distinct, {} duplicates", stats.distinct, stats.duplicates);
    assert_eq!(received.len(), REPLICAS, "every reader answered /metrics: {received:?}");
    for (pod, r, d) in &received {
        assert!(*r <= BACKLOG as f64 / 2.0, "{pod} took {r} of {BACKLOG}, more than half");
        assert!(*d > 0.0, "{pod} delivered nothing");
    }
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}

/// When each epoch opened (operator clock) and when this test first saw it committed.
#[derive(Debug, Default)]
struct Epochs {
    opened_ms: BTreeMap<u64, i64>,
    committed_seen_ms: BTreeMap<u64, i64>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn watch_epochs(
    system: &System,
    source: &str,
    stop: CancellationToken,
) -> (Arc<Mutex<Epochs>>, tokio::task::JoinHandle<()>) {
    let api: Api<ConfigMap> = Api::default_namespaced(system.client.clone());
    let name = checkpoint_configmap_name(source);
    let epochs: Arc<Mutex<Epochs>> = Arc::default();
    let out = epochs.clone();
    let task = tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Ok(Some(cm)) = api.get_opt(&name).await
                && let Some(data) = cm.data.filter(|d| d.contains_key("openEpoch"))
                && let Ok(cp) = Checkpoint::from_data(&data)
            {
                let cp: Checkpoint = cp;
                let mut e = epochs.lock().unwrap();
                e.opened_ms.entry(cp.open).or_insert(cp.opened_at_ms);
                for epoch in 1..=cp.committed {
                    e.committed_seen_ms.entry(epoch).or_insert_with(now_ms);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (out, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_exactly_once_source_holds_within_its_bound_and_keeps_committing() -> Result<()> {
    const SOURCE: &str = "bp-epochs";
    const RATE: u32 = 50;
    /// Long enough that an epoch's fixed cost (the operator's 0.5 s tick, the readers' 0.25 s
    /// checkpoint poll, lease writes) stays small beside it on a loaded two-core machine: at 3 s,
    /// interval + horizon (1.5 s) left 1.5 s for that, and one epoch in a full parallel run took 9 s.
    const INTERVAL_S: i64 = 6;
    /// The share over the horizon (the default 2 s, below half the interval): 17/s x 2 s.
    const SHARE_BOUND: f64 = 34.0;
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-bp-epochs", false, &options).await?;
    fill(&queue).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-backpressure-epochs");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&bin_dir(), &dir).await?;
    system.start_operator()?;
    let source =
        source(SOURCE, &queue, &endpoint, &sink.url()).rate_limit(RATE).exactly_once(INTERVAL_S as u32);
    system.apply_source(&source.yaml()).await?;
    let system = Arc::new(system);
    let stop = CancellationToken::new();
    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (held, sampler) = sample_held(system.clone(), SOURCE, counting.clone(), stop.clone());
    let (epochs, watcher) = watch_epochs(&system, SOURCE, stop.clone());

    // Count from when all three readers apply their share (before, a reader alone has the full
    // limit and a larger bound, and what it took then settles within its horizon).
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let share = f64::from(RATE.div_ceil(REPLICAS as u32));
    let start = Instant::now();
    loop {
        let scraped = scrape::readers(&system, &http, SOURCE).await;
        if scraped.len() == REPLICAS && scraped.values().all(|t| metric(t, SHARE) == Some(share)) {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("readers not at a {share}/s share within 120 s; logs under {}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let counted_from_ms = now_ms();
    counting.store(true, std::sync::atomic::Ordering::SeqCst);
    let took = wait_delivered(&sink, &system, Duration::from_secs(240)).await?;
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL_S as u64)).await;
    stop.cancel();
    let _ = (sampler.await, watcher.await);

    println!(
        "{RATE}/s source-wide over {REPLICAS} readers ({share}/s each), exactlyOnce every {INTERVAL_S} s: \
         all {BACKLOG} delivered {took:.1?} after the shares applied; bound {SHARE_BOUND} held each"
    );
    let held = held.lock().unwrap().clone();
    for (pod, h) in &held {
        println!(
            "{pod}: held at most {} (bound in force then {}) over {} samples; above the bound in force: {:?}",
            h.peak, h.bound_at_peak, h.samples, h.over_bound
        );
    }
    let epochs = std::mem::take(&mut *epochs.lock().unwrap());
    let mut lengths = Vec::new();
    for (epoch, committed) in &epochs.committed_seen_ms {
        if let Some(opened) = epochs.opened_ms.get(epoch).filter(|o| **o >= counted_from_ms) {
            lengths.push((*epoch, (committed - opened) as f64 / 1000.0));
        }
    }
    let longest = lengths.iter().map(|(_, l)| *l).fold(0.0, f64::max);
    println!(
        "epochs opened after the shares applied, opening to commit seen (s): {lengths:?}; longest {longest:.1} s"
    );
    let stats = sink.stats();
    println!("sink: {} distinct, {} duplicates", stats.distinct, stats.duplicates);
    assert_eq!(held.len(), REPLICAS, "every reader was sampled: {held:?}");
    for (pod, h) in &held {
        assert!(h.samples > 10, "{pod}: too few samples");
        assert!(h.peak <= SHARE_BOUND, "{pod} held {}, more than its share's bound {SHARE_BOUND}", h.peak);
    }
    assert!(lengths.len() >= 3, "too few epochs committed: {lengths:?}");
    // How long an epoch took is printed above, not asserted: on a loaded machine the lease and
    // coordinator cadence stretches it whatever the readers hold (16.8 s at a load average of 26,
    // with every reader under its bound). What this test holds the readers to is the bound itself
    // (above) and epochs that keep committing while the backlog drains.
    assert_eq!(stats.duplicates, 0, "exactlyOnce delivered duplicates");
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
