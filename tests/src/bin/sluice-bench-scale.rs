//! `sluice-bench-scale`: how fast the autoscaler reacts to a burst, on the whole system as processes
//! (LocalStack, the local control plane with its process runner, the operator, reader processes).
//!
//! Each run waits until the source is idle at zero readers, sends a burst, and samples the reader
//! Deployment's `spec.replicas` every 50 ms. The reaction is the time from the burst's arrival (the
//! first SendMessageBatch acknowledged, so its messages are visible in the queue) to the first sample
//! with more replicas than before, against the target of one poll interval plus 2 s
//! (`sluice_tests::reaction`); with `activationReadings` n, n poll intervals plus 2 s.
//!
//! `--activation-readings 1,2` alternates the source's `scaling.activationReadings` run by run on
//! the same system and prints the reactions side by side: what confirming a wake-up from zero by a
//! second reading costs.
//!
//! Run: `cargo build --workspace --bins && target/debug/sluice-bench-scale --runs 5`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Parser;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::reaction::{Reaction, ReplicaSample, SLACK};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, bin_dir};

const SOURCE: &str = "bench";
#[derive(Debug, Parser)]
#[command(name = "sluice-bench-scale")]
struct Args {
    /// Bursts to measure.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Messages per burst.
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// Concurrent SendMessageBatch loops per burst.
    #[arg(long, default_value_t = 4)]
    senders: usize,
    /// The source's scaling.pollIntervalSeconds.
    #[arg(long, default_value_t = 1)]
    poll_interval: u64,
    /// The source's scaling.maxReplicas.
    #[arg(long, default_value_t = 4)]
    max_replicas: i32,
    /// The source's scaling.activationReadings; several (`1,2`) alternate run by run.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    activation_readings: Vec<u32>,
    /// Where the system keeps logs and state (default: a fresh temporary directory, kept).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

fn source_yaml(queue: &TestQueue, endpoint: &str, sink: &str, args: &Args, readings: u32) -> String {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .activation_readings(readings)
        .visibility_timeout(10)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(0, args.max_replicas)
        .target_per_replica(100)
        .poll_interval(args.poll_interval)
        .scale_down_stabilization(3)
        .idle_cooldown(3)
        .yaml()
}

/// One burst: returns its reaction and how long sending took.
async fn run_once(
    system: &System,
    queue: &TestQueue,
    args: &Args,
    readings: u32,
) -> Result<(Reaction, Duration)> {
    let start = Instant::now();
    let samples: Arc<Mutex<Vec<ReplicaSample>>> = Arc::default();
    let first_ack: Arc<Mutex<Option<Duration>>> = Arc::default();
    let sampling = async {
        // Until the fleet has peaked or 60 s passed.
        while start.elapsed() < Duration::from_secs(60) {
            let replicas = system.reader_replicas(SOURCE).await?.unwrap_or(0);
            samples.lock().expect("samples").push(ReplicaSample { at: start.elapsed(), replicas });
            if replicas >= args.max_replicas {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::Ok(())
    };
    let sending = async {
        let per = args.messages.div_ceil(args.senders).max(10);
        let sends = (0..args.senders).map(|_| async {
            // The first batch alone, so its acknowledgment marks the burst's arrival.
            queue.send_batch(10).await?;
            first_ack.lock().expect("first ack").get_or_insert(start.elapsed());
            queue.send_batch(per - 10).await
        });
        for result in futures::future::join_all(sends).await {
            result?;
        }
        anyhow::Ok(start.elapsed())
    };
    let (sampled, sent) = tokio::join!(sampling, sending);
    sampled?;
    let sent = sent?;
    let burst_at = first_ack.lock().expect("first ack").context("no batch was acknowledged")?;
    let samples = samples.lock().expect("samples").clone();
    // Each reading a wake-up waits for is one poll interval.
    let allowed = Duration::from_secs(args.poll_interval) * readings;
    Ok((Reaction::measure(burst_at, &samples, allowed), sent - burst_at))
}

fn median(mut values: Vec<Duration>) -> Option<Duration> {
    values.sort();
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => tempfile::Builder::new().prefix("sluice-bench-scale-").tempdir()?.keep(),
    };
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(10), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "bench-scale", false, &options).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let mut system = System::start(&bin_dir(), &state_dir).await?;
    system.start_operator()?;
    println!(
        "sluice-bench-scale: {} runs per activationReadings {:?}, bursts of {} messages ({} senders), \
         pollIntervalSeconds {}, maxReplicas {}; state under {}",
        args.runs,
        args.activation_readings,
        args.messages,
        args.senders,
        args.poll_interval,
        args.max_replicas,
        state_dir.display()
    );

    let mut results: Vec<Results> =
        args.activation_readings.iter().map(|&readings| Results::new(readings)).collect();
    let mut sent_total = 0u64;
    for run in 1..=args.runs {
        for results in &mut results {
            let readings = results.readings;
            system.apply_source(&source_yaml(&queue, &endpoint, &sink.url(), &args, readings)).await?;
            system.wait_idle_at_zero(SOURCE, Duration::from_secs(180)).await?;
            let (r, sending) = run_once(&system, &queue, &args, readings).await?;
            sent_total += args.messages.div_ceil(args.senders).max(10) as u64 * args.senders as u64;
            results.record(run, &r, sending);
            // Let the readers drain this burst before the next run measures from zero.
            sink.wait_for_distinct(sent_total, Duration::from_secs(300)).await?;
        }
    }
    let poll = Duration::from_secs(args.poll_interval);
    for results in &results {
        results.summary(args.runs, poll);
    }
    if results.len() > 1 {
        let medians: Vec<String> = results
            .iter()
            .map(|r| {
                let m = median(r.reactions.clone());
                format!(
                    "activationReadings {}: {}",
                    r.readings,
                    m.map_or_else(|| "none".into(), |m| format!("{:.2}s", m.as_secs_f64()))
                )
            })
            .collect();
        println!("side by side, median burst to raised replicas: {}", medians.join(" | "));
    }
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}

/// The reactions measured with one `activationReadings`.
struct Results {
    readings: u32,
    reactions: Vec<Duration>,
    peaks: Vec<Duration>,
    missed: usize,
}

impl Results {
    fn new(readings: u32) -> Self {
        Self { readings, reactions: Vec::new(), peaks: Vec::new(), missed: 0 }
    }

    fn record(&mut self, run: usize, r: &Reaction, sending: Duration) {
        let readings = self.readings;
        match r.reaction {
            Some(reaction) => {
                let met = r.within_target();
                self.missed += usize::from(!met);
                println!(
                    "run {run} (activationReadings {readings}): burst to raised replicas {:.2}s ({}), to peak of {} {:.2}s; sending took {:.1}s",
                    reaction.as_secs_f64(),
                    if met { "met" } else { "MISSED" },
                    r.peak_replicas,
                    r.to_peak.unwrap_or(reaction).as_secs_f64(),
                    sending.as_secs_f64()
                );
                self.reactions.push(reaction);
                if let Some(p) = r.to_peak {
                    self.peaks.push(p);
                }
            }
            None => {
                self.missed += 1;
                println!(
                    "run {run} (activationReadings {readings}): replicas never rose within 60 s (MISSED)"
                );
            }
        }
    }

    fn summary(&self, runs: usize, poll: Duration) {
        let target = poll * self.readings + SLACK;
        let med = median(self.reactions.clone());
        let secs =
            |d: Option<&Duration>| d.map_or_else(|| "-".into(), |m| format!("{:.2}s", m.as_secs_f64()));
        println!(
            "activationReadings {}: median burst to raised replicas {} over {runs} runs (min {}, max {}); \
             target {:.0}s ({}); median to peak {}; {} run(s) missed",
            self.readings,
            secs(med.as_ref()),
            secs(self.reactions.iter().min()),
            secs(self.reactions.iter().max()),
            target.as_secs_f64(),
            if med.is_some_and(|m| m <= target) { "met" } else { "MISSED" },
            secs(median(self.peaks.clone()).as_ref()),
            self.missed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Duration::from_secs;
        assert_eq!(median(vec![s(3), s(1), s(2)]), Some(s(2)));
        assert_eq!(median(vec![s(4), s(1), s(2), s(3)]), Some(Duration::from_millis(2_500)));
        assert_eq!(median(Vec::new()), None);
    }
}
