//! `sluice-bench-efficiency`: what autoscaling costs in drain time, on the whole system as processes
//! (LocalStack, the local control plane with its process runner, the operator, reader processes).
//!
//! A burst of N messages lands in an empty queue behind a sink that answers each event after a fixed
//! latency, so a reader drains at most its sink concurrency over that latency whatever the machine's
//! speed. The same burst is drained twice per guarantee: once by `maxReplicas` readers running from
//! the start (the best a fixed fleet can do), once autoscaled from `minReplicas`. The efficiency is
//! the autoscaled drain time over the fixed one (1.0 would be a scaler that knew the burst was
//! coming); after the burst the autoscaled fleet is watched back down to its minimum.
//!
//! Drain time runs from the burst's arrival (the first SendMessageBatch acknowledged) to the sink
//! holding every message of the burst.
//!
//! Run: `cargo build --workspace --bins && target/debug/sluice-bench-efficiency`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, bin_dir};

#[derive(Debug, Parser)]
#[command(name = "sluice-bench-efficiency")]
struct Args {
    /// Messages per burst.
    #[arg(long, default_value_t = 2400)]
    messages: usize,
    /// The sink's answer time per event, in milliseconds.
    #[arg(long, default_value_t = 200)]
    sink_latency_ms: u64,
    /// Concurrent requests per reader to the sink (with the latency: each reader's ceiling).
    #[arg(long, default_value_t = 2)]
    concurrency: u32,
    /// The source's scaling.minReplicas when autoscaled.
    #[arg(long, default_value_t = 1)]
    min_replicas: i32,
    /// The source's scaling.maxReplicas (the fixed fleet's size).
    #[arg(long, default_value_t = 4)]
    max_replicas: i32,
    /// The source's scaling.targetMessagesPerReplica.
    #[arg(long, default_value_t = 300)]
    target_per_replica: u32,
    /// The source's scaling.targetDrainSeconds.
    #[arg(long, default_value_t = 30)]
    target_drain: u32,
    /// The source's scaling.pollIntervalSeconds.
    #[arg(long, default_value_t = 2)]
    poll_interval: u64,
    /// The source's scaling.scaleDownStabilizationSeconds.
    #[arg(long, default_value_t = 20)]
    scale_down_stabilization: u32,
    /// Guarantees to measure: `atLeastOnce`, `exactlyOnce` or both (comma-separated).
    #[arg(long, default_value = "atLeastOnce,exactlyOnce", value_delimiter = ',')]
    guarantees: Vec<String>,
    /// Where the system keeps logs and state (default: a fresh temporary directory, kept).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// One drain: how long it took and how the fleet moved.
struct Drain {
    took: Duration,
    peak: i32,
    /// (seconds since the burst, replicas) at every change of the Deployment's replicas.
    steps: Vec<(f64, i32)>,
    /// Seconds from the last delivery back to the minimum (autoscaled only; `None`: not within the
    /// watch).
    back_to_min: Option<f64>,
}

fn source_yaml(
    name: &str,
    guarantee: &str,
    queue: &TestQueue,
    endpoint: &str,
    sink: &str,
    args: &Args,
) -> String {
    let yaml = SourceYaml::new(name, &queue.url, endpoint)
        .visibility_timeout(30)
        .held_max_messages(20)
        .sink("webhook", Sink::http(sink).timeout_ms(5_000).concurrency(args.concurrency))
        .target_per_replica(args.target_per_replica)
        .target_drain(args.target_drain)
        .poll_interval(args.poll_interval)
        .scale_down_stabilization(args.scale_down_stabilization);
    let yaml = if guarantee == "exactlyOnce" { yaml.exactly_once(2) } else { yaml.at_least_once() };
    yaml.replicas(
        if name.ends_with("fixed") { args.max_replicas } else { args.min_replicas },
        args.max_replicas,
    )
    .yaml()
}

/// Sends the burst with four SendMessageBatch loops; answers the moment the first batch was
/// acknowledged.
async fn burst(queue: &TestQueue, messages: usize) -> Result<Instant> {
    let per = messages.div_ceil(4);
    queue.send_batch(10).await?;
    let arrived = Instant::now();
    let rest = [per - 10, per, per, messages - 3 * per];
    for sent in futures::future::join_all(rest.map(|n| queue.send_batch(n))).await {
        sent?;
    }
    Ok(arrived)
}

/// Drains one burst for the source `name` and watches the fleet.
async fn drain_once(
    system: &System,
    name: &str,
    guarantee: &str,
    endpoint: &str,
    args: &Args,
) -> Result<Drain> {
    let client = sqs_client(endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, &format!("bench-eff-{name}"), false, &options).await?;
    let sink =
        SinkServer::start_with_latency("127.0.0.1:0", Duration::from_millis(args.sink_latency_ms)).await?;
    system.apply_source(&source_yaml(name, guarantee, &queue, endpoint, &sink.url(), args)).await?;
    let start = if name.ends_with("fixed") { args.max_replicas } else { args.min_replicas };
    system.wait_ready_readers(name, start, Duration::from_secs(120)).await?;
    let arrived = burst(&queue, args.messages).await?;
    let mut steps = vec![(0.0, start)];
    let mut delivered_at = None;
    let mut back_to_min = None;
    let watch = Duration::from_secs(u64::from(args.scale_down_stabilization) + 90);
    loop {
        // A Deployment read without `spec.replicas` (the local control plane does not default it
        // between the operator's apply and the scaler's) says nothing: the last count holds.
        let replicas = system.reader_replicas(name).await?.or(steps.last().map(|(_, r)| *r)).unwrap_or(start);
        let at = arrived.elapsed().as_secs_f64();
        if steps.last().is_some_and(|(_, r)| *r != replicas) {
            steps.push((at, replicas));
        }
        if delivered_at.is_none() && sink.stats().distinct >= args.messages as u64 {
            delivered_at = Some(arrived.elapsed());
        }
        if let Some(took) = delivered_at {
            let peaked = steps.iter().any(|(_, r)| *r > start);
            if name.ends_with("fixed") || !peaked {
                break;
            }
            if replicas <= args.min_replicas {
                back_to_min = Some(at - took.as_secs_f64());
                break;
            }
            if arrived.elapsed() > took + watch {
                break;
            }
        } else if arrived.elapsed() > Duration::from_secs(600) {
            bail!("{name}: {} of {} delivered in 600 s", sink.stats().distinct, args.messages);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = delivered_at.context("the loop ends only once every message was delivered")?;
    let peak = steps.iter().map(|(_, r)| *r).max().unwrap_or(start);
    system.delete_source(name).await?;
    sink.stop().await?;
    queue.delete().await?;
    Ok(Drain { took, peak, steps, back_to_min })
}

fn describe(label: &str, d: &Drain) -> String {
    let steps: Vec<String> = d.steps.iter().map(|(at, r)| format!("{r}@{at:.1}s")).collect();
    format!(
        "  {label:<10} drained in {:6.1} s, peak {} replicas, replicas over time: {}",
        d.took.as_secs_f64(),
        d.peak,
        steps.join(" ")
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => tempfile::Builder::new().prefix("sluice-bench-efficiency-").tempdir()?.keep(),
    };
    let endpoint = LocalStack::ensure().await?;
    let mut system = System::start(&bin_dir(), &state_dir).await?;
    system.start_operator()?;
    let per_reader = f64::from(args.concurrency) * 1000.0 / args.sink_latency_ms as f64;
    println!(
        "sluice-bench-efficiency: bursts of {} messages, sink {} ms per event x {} concurrent \
         (≤ {per_reader:.0} msg/s per reader), replicas {}..{}, targetMessagesPerReplica {}, \
         targetDrainSeconds {}, pollIntervalSeconds {}, scaleDownStabilizationSeconds {}; state under {}",
        args.messages,
        args.sink_latency_ms,
        args.concurrency,
        args.min_replicas,
        args.max_replicas,
        args.target_per_replica,
        args.target_drain,
        args.poll_interval,
        args.scale_down_stabilization,
        state_dir.display()
    );
    for guarantee in &args.guarantees {
        let short = if guarantee == "exactlyOnce" { "eo" } else { "alo" };
        let fixed = drain_once(&system, &format!("eff-{short}-fixed"), guarantee, &endpoint, &args).await?;
        let auto = drain_once(&system, &format!("eff-{short}-auto"), guarantee, &endpoint, &args).await?;
        let ratio = auto.took.as_secs_f64() / fixed.took.as_secs_f64();
        println!("{guarantee}: efficiency (autoscaled / fixed drain time) {ratio:.2} (goal ≤ 1.2)");
        println!("{}", describe(&format!("{} fixed", args.max_replicas), &fixed));
        println!("{}", describe("autoscaled", &auto));
        match auto.back_to_min {
            Some(s) => println!(
                "  after the burst: back to {} replica(s) {s:.1} s after the last delivery",
                args.min_replicas
            ),
            None => println!(
                "  after the burst: still above {} replica(s) when the watch ended",
                args.min_replicas
            ),
        }
    }
    drop(system);
    Ok(())
}
