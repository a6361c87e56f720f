//! Benchmark: the release-built `sluice-reader` against a hand-written aws-sdk loop (receive, POST,
//! DeleteMessageBatch) with the same number of pollers, on the same LocalStack, to the same HTTP
//! sink, side by side. Not a test; run it with
//!
//! ```sh
//! cargo build --release -p sluice-reader --bin sluice-reader --example bench_vs_loop
//! target/release/examples/bench_vs_loop compare --runs 5
//! ```
//!
//! Why this shape: these machines are shared and noisy, so single figures mean little. Each round
//! runs both consumers back to back on fresh queues of the same size (alternating which goes first)
//! and the report gives medians and the ratios reader/baseline, per round and overall. Both are
//! separate processes, and their CPU is read the same way, from /proc/<pid>/stat while they run,
//! over the timed window: from the first event at the sink to the moment SQS reports the queue
//! empty. Filling the queue and starting the process are outside the window.
//!
//! `--reader A,B,...` runs several reader builds (e.g. release profiles) in the same rounds, each
//! beside the same loop, so their memory and CPU compare under the same load; the summary gives
//! each one's ratios to the loop and to the first reader.
//!
//! `--backend standin` runs every consumer against the bench's in-memory SQS (`standin.rs`) instead
//! of LocalStack, for round-trip questions where SQS's own time must be far below the RTT; `--peer
//! sqs-consumer,boto3` adds other teams' consumers to the same rounds (`peers/`, installed by
//! `scripts/bench-peers.sh`). Behind a proxy each run also prints where its receives' time went
//! (`exchanges.rs`); `--harness shared|split` puts the proxies and the stand-in on the bench's
//! runtime or on their own (`runtimes.rs`); `--reader-workers 2,4` runs each reader once per
//! `TOKIO_WORKER_THREADS` value, side by side. BENCHMARKS.md has the runs.

#![forbid(unsafe_code)]

mod baseline;
mod child;
mod exchanges;
mod peers;
mod probe;
mod proc_stat;
mod queue;
mod report;
mod rtt;
mod runtimes;
// Its latency figures are bench_cost's (timed bodies); this bench counts arrivals only.
#[allow(dead_code)]
mod sink;
mod standin;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use sluice_tests::source::{Sink, SourceYaml};

use child::{default_reader, stop};
use report::{Consumer, Memory, ReaderVariant, Sample};
use rtt::Watched;
use runtimes::{Placement, Runtimes, Shape};
use sink::CountingSink;

#[derive(Parser)]
#[command(about = "sluice-reader vs a plain aws-sdk receive/POST/delete loop, on LocalStack")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run both consumers, alternating, and print throughput, CPU and ratios.
    Compare(CompareArgs),
    /// The baseline loop itself (started by `compare` as a process of its own).
    Baseline(BaselineArgs),
    /// Check the latency proxy: time sequential ListQueues calls direct and through it.
    Probe(ProbeArgs),
    /// Serve the in-memory SQS stand-in alone (for a manual run), printing its URL, until Ctrl-C.
    Standin,
}

#[derive(Args)]
struct ProbeArgs {
    /// Round trips (ms) the proxy adds, each probed in turn.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    rtt_ms: Vec<u64>,
    #[arg(long, default_value_t = 40)]
    calls: usize,
    #[arg(long, env = "SLUICE_LOCALSTACK_ENDPOINT", default_value = "http://127.0.0.1:4566")]
    endpoint: String,
    /// `localstack` (the endpoint above) or `standin` (started in this process).
    #[arg(long, default_value = "localstack")]
    backend: Backend,
    /// The proxy and the stand-in on the bench's runtime (`shared`), each on its own (`split`), or
    /// together on one of their own (`far`).
    #[arg(long, default_value = "far")]
    harness: Placement,
    /// The proxy's round trip half each way (`even`) or all on the answers, kept on time (`answers`).
    #[arg(long, default_value = "answers")]
    proxy_delay: Shape,
}

#[derive(Args, Clone)]
struct CompareArgs {
    /// Messages per run: one count for every RTT, or one per `--rtt-ms` entry (a run should last
    /// well over the reader's one-second poller windows at every RTT).
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    messages: Vec<usize>,
    /// Rounds; each round runs the reader once and the baseline once.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// ReceiveMessage loops per consumer.
    #[arg(long, default_value_t = 4)]
    pollers: usize,
    /// Long-poll wait per receive, for both.
    #[arg(long, default_value_t = 2)]
    wait_seconds: i32,
    /// LocalStack endpoint.
    #[arg(long, env = "SLUICE_LOCALSTACK_ENDPOINT", default_value = "http://127.0.0.1:4566")]
    endpoint: String,
    /// `localstack` (the endpoint above) or `standin`: the bench's in-memory SQS (standin.rs), whose
    /// own time per call is far below any round trip, for the round-trip question.
    #[arg(long, default_value = "localstack")]
    backend: Backend,
    /// Peer consumers to run in the same rounds (installed by scripts/bench-peers.sh):
    /// `sqs-consumer`, `boto3`, comma-separated.
    #[arg(long, value_delimiter = ',')]
    peer: Vec<peers::Peer>,
    /// Where scripts/bench-peers.sh installed the peers.
    #[arg(long, default_value = ".sluice/bench-peers")]
    peers_dir: PathBuf,
    /// The reader binaries, comma-separated (labelled reader, reader2, ... in that order);
    /// default: `sluice-reader` next to this example's directory.
    #[arg(long, value_delimiter = ',')]
    reader: Vec<PathBuf>,
    /// Run each reader once per value, with that `TOKIO_WORKER_THREADS` (labelled in order after
    /// the binaries); default: the reader's own choice.
    #[arg(long, value_delimiter = ',')]
    reader_workers: Vec<usize>,
    /// The proxies and the stand-in on the bench's runtime (`shared`), each on its own (`split`), or
    /// together on one of their own (`far`).
    #[arg(long, default_value = "far")]
    harness: Placement,
    /// The proxies' round trip half each way (`even`) or all on the answers, kept on time
    /// (`answers`).
    #[arg(long, default_value = "answers")]
    proxy_delay: Shape,
    /// Round trips (ms) added between the consumers and LocalStack by a latency proxy (10%
    /// jitter), each measured in its own set of rounds; 0 means no proxy. E.g. `0,5,20,50`.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    rtt_ms: Vec<u64>,
    /// Also put the same round trip between the consumers and the sink.
    #[arg(long)]
    sink_rtt: bool,
    /// Body size of each message in bytes (0: a small JSON document of about 40 bytes).
    #[arg(long, default_value_t = 0)]
    body_bytes: usize,
    /// Start each consumer on the empty queue and read its idle memory after this many seconds,
    /// then fill the queue while it runs (the throughput figures then include the fill; use this
    /// for footprint, not for throughput).
    #[arg(long, default_value_t = 0)]
    idle_seconds: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Localstack,
    Standin,
}

#[derive(Args)]
struct BaselineArgs {
    #[arg(long)]
    queue: String,
    #[arg(long)]
    endpoint: String,
    #[arg(long)]
    sink: String,
    #[arg(long)]
    pollers: usize,
    #[arg(long)]
    wait_seconds: i32,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    match Cli::parse().command {
        Cmd::Baseline(a) => {
            let consumer = baseline::Loop {
                queue: a.queue,
                endpoint: a.endpoint,
                sink: a.sink,
                pollers: a.pollers,
                wait_seconds: a.wait_seconds,
            };
            consumer.run().await
        }
        Cmd::Compare(args) => compare(args).await,
        Cmd::Standin => {
            let standin = standin::start_on(&tokio::runtime::Handle::current())?;
            println!("{}", standin.url);
            let _ = tokio::signal::ctrl_c().await;
            let (calls, mean_us, max_us) = standin.own_time();
            println!("{calls} calls, mean {:.3} ms, max {:.1} ms", mean_us / 1000.0, max_us / 1000.0);
            Ok(())
        }
        Cmd::Probe(a) => probe(a).await,
    }
}

/// The stand-in SQS when asked for (its URL replaces `endpoint`); LocalStack needs nothing started.
fn start_backend(
    backend: Backend,
    endpoint: &mut String,
    runtimes: &Runtimes,
) -> Result<Option<standin::StandIn>, String> {
    if backend == Backend::Localstack {
        return Ok(None);
    }
    let standin = standin::start_on(&runtimes.backend)?;
    *endpoint = standin.url.clone();
    Ok(Some(standin))
}

async fn probe(mut a: ProbeArgs) -> Result<(), String> {
    let runtimes = Runtimes::new(a.harness, a.proxy_delay)?;
    // Its own-time figures are not printed here; the server runs until the process ends.
    let _standin = start_backend(a.backend, &mut a.endpoint, &runtimes)?;
    println!("load average {}, harness {:?}, proxy delay {:?}", probe::load(), a.harness, a.proxy_delay);
    let direct = queue::client(&a.endpoint);
    probe::calls(&direct, 1).await?;
    println!("direct {}: ListQueues x {}: {}", a.endpoint, a.calls, probe::calls(&direct, a.calls).await?);
    for &ms in &a.rtt_ms {
        let probed = probe::through_proxy(&runtimes, &a.endpoint, Duration::from_millis(ms), a.calls).await?;
        println!(
            "through a {ms} ms proxy: {probed} (adds {:.2} ms to the RTT)",
            probed.median_ms - ms as f64
        );
    }
    println!("load average {}", probe::load());
    Ok(())
}

async fn compare(mut args: CompareArgs) -> Result<(), String> {
    let runtimes = Runtimes::new(args.harness, args.proxy_delay)?;
    let standin = start_backend(args.backend, &mut args.endpoint, &runtimes)?;
    let binaries = match args.reader.is_empty() {
        true => vec![default_reader()?],
        false => args.reader.clone(),
    };
    let workers: Vec<Option<usize>> = match args.reader_workers.is_empty() {
        true => vec![None],
        false => args.reader_workers.iter().map(|&w| Some(w)).collect(),
    };
    let readers: Vec<ReaderVariant> = binaries
        .iter()
        .flat_map(|path| workers.iter().map(|&workers| ReaderVariant { path: path.clone(), workers }))
        .collect();
    if args.messages.len() != 1 && args.messages.len() != args.rtt_ms.len() {
        return Err("--messages takes one count, or one per --rtt-ms entry".into());
    }
    if let Some(missing) = binaries.iter().find(|r| !r.exists()) {
        return Err(format!(
            "{} does not exist: cargo build --release -p sluice-reader --bin sluice-reader",
            missing.display()
        ));
    }
    let client = queue::client(&args.endpoint);
    client.list_queues().send().await.map_err(|e| {
        format!(
            "LocalStack not reachable at {} ({e:?}): bash tests/scripts/localstack.sh start",
            args.endpoint
        )
    })?;
    let sink = CountingSink::default();
    let sink_url = sink.start().await.map_err(|e| format!("sink: {e}"))?;
    let ticks = proc_stat::ticks_per_second();
    let placed = match args.harness {
        Placement::Shared => "shared: proxies and stand-in on the bench's runtime, beside the sink",
        Placement::Split => {
            "split: proxies and stand-in each on a runtime of its own, the sink on the bench's"
        }
        Placement::Far => {
            "far: proxies and stand-in together on a runtime of their own, the sink on the bench's"
        }
    };
    let shaped = match args.proxy_delay {
        Shape::Even => "half the RTT each way",
        Shape::Answers => "the RTT on the answers, kept on time",
    };
    let harness = format!("{placed}; proxy delay: {shaped}");
    report::header(
        &args.endpoint,
        &readers,
        &args.messages,
        args.runs,
        args.pollers,
        args.wait_seconds,
        &harness,
    );

    let mut samples = Vec::new();
    let mut probed = Vec::new();
    for (i, &rtt_ms) in args.rtt_ms.iter().enumerate() {
        let rtt = Duration::from_millis(rtt_ms);
        let messages = args.messages.get(i).copied().unwrap_or(args.messages[0]);
        if rtt_ms > 0 {
            let p = probe::through_proxy(&runtimes, &args.endpoint, rtt, 40).await?;
            println!("probed through the {rtt_ms} ms proxy: {p} (load average {})", probe::load());
            probed.push((rtt_ms, p.median_ms));
        }
        for round in 0..args.runs {
            // Each round starts with a different consumer, so none always runs first.
            let mut order: Vec<Consumer> = (0..readers.len()).map(Consumer::Reader).collect();
            order.push(Consumer::Baseline);
            order.extend(args.peer.iter().map(|&p| Consumer::Peer(p)));
            let first = round % order.len();
            order.rotate_left(first);
            for consumer in order {
                // Fresh proxies per run, so the counts are this consumer's alone.
                let watched = Arc::new(Watched::default());
                let (sqs_proxy, sink_proxy) = if rtt_ms == 0 {
                    (None, None)
                } else {
                    let sqs = rtt::proxy(&runtimes, &args.endpoint, rtt, Some(watched.clone()))?;
                    let sink = match args.sink_rtt {
                        true => Some(rtt::proxy(&runtimes, &sink_url, rtt, None)?),
                        false => None,
                    };
                    (Some(sqs), sink)
                };
                let endpoint = sqs_proxy.as_ref().map_or(args.endpoint.clone(), |p| p.url());
                let consumer_sink = sink_proxy.as_ref().map_or(sink_url.clone(), |p| format!("{}/", p.url()));
                let run = Run {
                    args: &args,
                    readers: &readers,
                    sink: &sink,
                    sink_url: &consumer_sink,
                    endpoint: &endpoint,
                    client: &client,
                    ticks,
                    watched: &watched,
                    standin: standin.as_ref(),
                    rtt_ms,
                    messages,
                };
                let sample = run.once(consumer, round).await?;
                report::line(&sample);
                report::breakdown(&sample);
                samples.push(sample);
            }
        }
    }
    // LocalStack's own time per call (plus the SDK's), measured now: the real round trip of a call
    // behind the proxy is the added RTT plus this.
    let base_ms = probe::calls(&client, 20).await?.median_ms;
    report::summary(&samples, base_ms, &probed);
    if let Some(s) = &standin {
        let (calls, mean_us, max_us) = s.own_time();
        println!(
            "stand-in SQS own time per call (handler, no network): mean {:.3} ms, max {:.1} ms over {calls} calls",
            mean_us / 1000.0,
            max_us / 1000.0
        );
    }
    Ok(())
}

struct Run<'a> {
    args: &'a CompareArgs,
    readers: &'a [ReaderVariant],
    sink: &'a CountingSink,
    sink_url: &'a str,
    /// Where the consumer reaches SQS: LocalStack itself or a latency proxy in front of it.
    endpoint: &'a str,
    client: &'a aws_sdk_sqs::Client,
    ticks: u64,
    /// This run's proxy: its SQS calls and its receives' legs.
    watched: &'a Arc<Watched>,
    /// The stand-in, for its handler time over the run.
    standin: Option<&'a standin::StandIn>,
    rtt_ms: u64,
    messages: usize,
}

impl Run<'_> {
    async fn once(&self, consumer: Consumer, round: usize) -> Result<Sample, String> {
        let name = format!("bench-{}-{round}-{}", consumer.label(), fastrand::u32(..));
        let url = queue::create(self.client, &name).await?;
        let result = self.measure(consumer, round, &url).await;
        queue::delete(self.client, &url).await;
        result
    }

    async fn measure(&self, consumer: Consumer, round: usize, url: &str) -> Result<Sample, String> {
        let n = self.messages;
        let idle = Duration::from_secs(self.args.idle_seconds);
        if idle.is_zero() {
            queue::fill(self.client, url, n, self.args.body_bytes).await?;
        }
        self.sink.reset();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut child = self.spawn(consumer, url, &dir)?;
        let pid = child.id();
        let outcome = async {
            let mut idle_kib = None;
            if !idle.is_zero() {
                tokio::time::sleep(idle).await;
                idle_kib = Some(proc_stat::memory_kib(pid).map_err(|e| e.to_string())?);
                queue::fill(self.client, url, n, self.args.body_bytes).await?;
            }
            let (first, cpu_first) = self.first_event(&mut child, &dir).await?;
            let handler_first = self.standin.map(standin::StandIn::receive_time);
            let harness = || proc_stat::cpu_time(std::process::id(), self.ticks).map_err(|e| e.to_string());
            let harness_first = harness()?;
            let deadline = Instant::now() + Duration::from_secs(300);
            while self.sink.figures().0 < n {
                if Instant::now() > deadline {
                    return Err(format!(
                        "{} delivered only {:?} in 300 s",
                        consumer.label(),
                        self.sink.figures()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            queue::wait_empty(self.client, url, Duration::from_secs(60)).await?;
            let end = Instant::now();
            let cpu_end = proc_stat::cpu_time(pid, self.ticks).map_err(|e| e.to_string())?;
            let harness_window = (harness()? - harness_first).as_secs_f64();
            let calls = self.watched.calls.snapshot();
            // The stand-in's own time per receive over the window (handler entry to answer).
            let backend_receive_ms = match (handler_first, self.standin.map(standin::StandIn::receive_time)) {
                (Some((c0, us0)), Some((c1, us1))) if c1 > c0 => {
                    Some((us1 - us0) as f64 / 1000.0 / (c1 - c0) as f64)
                }
                _ => None,
            };
            let (rss, hwm) = proc_stat::memory_kib(pid).map_err(|e| e.to_string())?;
            let (_, accepted, _) = self.sink.figures();
            Ok::<Sample, String>(Sample {
                consumer,
                round,
                rtt_ms: self.rtt_ms,
                pollers: self.args.pollers as f64,
                receive_ms: None,
                windows: None,
                calls,
                exchanges: self.watched.exchanges.figures(),
                backend_receive_ms,
                memory: Memory { idle_kib: idle_kib.map(|(rss, _)| rss), end_kib: rss, peak_kib: hwm },
                seconds: (end - first).as_secs_f64(),
                cpu_window: (cpu_end - cpu_first).as_secs_f64(),
                harness_cpu_window: harness_window,
                cpu_total: cpu_end.as_secs_f64(),
                accepted,
                messages: n,
            })
        }
        .await;
        stop(&mut child);
        let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
        outcome.map(|mut sample| {
            if matches!(consumer, Consumer::Reader(_)) {
                match rtt::pollers_windows(&log) {
                    Some(w) => {
                        (sample.pollers, sample.receive_ms) = (w.pollers, Some(w.receive_ms));
                        sample.windows = Some(w);
                    }
                    None => sample.pollers = rtt::pollers_chosen(&log).unwrap_or(self.args.pollers) as f64,
                }
            }
            sample
        })
    }

    /// Wait (bounded) for the first delivery; the time it landed and the consumer's CPU then.
    async fn first_event(
        &self,
        child: &mut Child,
        dir: &tempfile::TempDir,
    ) -> Result<(Instant, Duration), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let (_, _, Some(first)) = self.sink.figures() {
                let cpu = proc_stat::cpu_time(child.id(), self.ticks).map_err(|e| e.to_string())?;
                return Ok((first, cpu));
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
                return Err(format!("the consumer exited early ({status}):\n{log}"));
            }
            if Instant::now() > deadline {
                return Err("no delivery within 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn spawn(&self, consumer: Consumer, url: &str, dir: &tempfile::TempDir) -> Result<Child, String> {
        let a = self.args;
        let mut command = match consumer {
            Consumer::Reader(which) => {
                let source = dir.path().join("source.yaml");
                let yaml = SourceYaml::bare("bench", url, self.endpoint)
                    .max_messages(10)
                    .wait_time(a.wait_seconds as u32)
                    .pollers(a.pollers as u32)
                    .sink(
                        "web",
                        Sink::http(self.sink_url).timeout_ms(5000).concurrency(a.pollers as u32 * 10),
                    )
                    .yaml();
                std::fs::write(&source, yaml).map_err(|e| e.to_string())?;
                let variant = &self.readers[which];
                let mut c = Command::new(&variant.path);
                if let Some(workers) = variant.workers {
                    c.env("TOKIO_WORKER_THREADS", workers.to_string());
                }
                // Its per-window poller figures (count, receive time), for the summary.
                c.env("RUST_LOG", "info,sluice_reader::run::pollers=debug");
                c.arg("--source")
                    .arg(&source)
                    .arg("--admin-addr=127.0.0.1:0")
                    .arg("--shutdown-deadline-seconds=5");
                c
            }
            Consumer::Baseline => {
                let mut c = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
                c.arg("baseline")
                    .args(["--queue", url, "--endpoint", self.endpoint, "--sink", self.sink_url])
                    .arg(format!("--pollers={}", a.pollers))
                    .arg(format!("--wait-seconds={}", a.wait_seconds));
                c
            }
            Consumer::Peer(peer) => {
                let mut c = peer.command(&a.peers_dir)?;
                c.env("QUEUE_URL", url)
                    .env("SQS_ENDPOINT", self.endpoint)
                    .env("SINK_URL", self.sink_url)
                    .env("POLLERS", a.pollers.to_string())
                    .env("WAIT_SECONDS", a.wait_seconds.to_string());
                c
            }
        };
        child::spawn_consumer(&mut command, &dir.path().join("stderr"))
    }
}
