//! Benchmark: what `sluice-reader` costs in SQS requests per message, counted by a proxy in front of
//! LocalStack and by the reader's own `sluice_reader_aws_requests_total`, side by side. Not a test;
//! run it with
//!
//! ```sh
//! cargo build --workspace --all-targets   # builds target/debug/sluice-reader and this example
//! target/debug/examples/bench_cost --endpoint "$SLUICE_LOCALSTACK_ENDPOINT"
//! ```
//!
//! Three workloads, each on a fresh queue with a fresh counting proxy, without the batching window
//! and with it: draining a backlog, a steady trickle sent one message at a time (with the delivery
//! latency, send to sink, at p50 and p99), and an idle queue (requests per hour). Request counts do
//! not depend on the machine's load; latencies do (these machines are shared): compare the two
//! rows of one run, not figures across runs.

#![forbid(unsafe_code)]

#[path = "../bench_vs_loop/child.rs"]
mod child;
#[path = "../bench_vs_loop/exchanges.rs"]
#[allow(dead_code)]
mod exchanges;
#[path = "../bench_vs_loop/queue.rs"]
#[allow(dead_code)]
mod queue;
#[path = "../bench_vs_loop/rtt.rs"]
#[allow(dead_code)]
mod rtt;
#[path = "../bench_vs_loop/runtimes.rs"]
#[allow(dead_code)]
mod runtimes;
#[path = "../bench_vs_loop/sink.rs"]
mod sink;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sluice_tests::source::{Sink, SourceYaml};
use tokio::time::Instant;

use rtt::{Calls, Watched};
use runtimes::{Placement, Runtimes, Shape};
use sink::CountingSink;

#[derive(Parser, Clone)]
#[command(about = "sluice-reader's SQS requests per message, with and without the batching window")]
struct Args {
    #[arg(long, env = "SLUICE_LOCALSTACK_ENDPOINT", default_value = "http://127.0.0.1:4566")]
    endpoint: String,
    /// Messages in the backlog drained.
    #[arg(long, default_value_t = 5000)]
    backlog: usize,
    /// Messages of the trickle, sent one by one at `--rate`.
    #[arg(long, default_value_t = 1000)]
    trickle: usize,
    #[arg(long, default_value_t = 50)]
    rate: u64,
    /// The batching window compared with none.
    #[arg(long, default_value_t = 200)]
    window_ms: u32,
    /// How long the idle queue is watched (after the first long polls came back empty).
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Which workloads to run, comma-separated: `drain`, `trickle`, `idle`.
    #[arg(long, value_delimiter = ',', default_value = "drain,trickle,idle")]
    workloads: Vec<Workload>,
    /// Default: `sluice-reader` in this example's target directory.
    #[arg(long)]
    reader: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Workload {
    Drain,
    Trickle,
    Idle,
}

/// One run's figures: what the proxy saw and what the reader counted itself.
struct Row {
    name: String,
    window_ms: u32,
    messages: usize,
    proxy: Calls,
    metric: u64,
    /// The span the counts cover (the idle runs: the watched part).
    seconds: f64,
    latency: Option<Vec<f64>>,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let reader = match &args.reader {
        Some(path) => path.clone(),
        None => child::default_reader()?,
    };
    let client = queue::client(&args.endpoint);
    client.list_queues().send().await.map_err(|e| {
        format!("LocalStack not reachable at {} ({e}): bash tests/scripts/localstack.sh start", args.endpoint)
    })?;
    let sink = CountingSink::default();
    let sink_url = sink.start().await.map_err(|e| format!("sink: {e}"))?;
    let runtimes = Runtimes::new(Placement::Shared, Shape::Even)?;
    let bench = Bench { args: &args, reader, client, sink, sink_url, runtimes };
    let mut rows = Vec::new();
    for &workload in &args.workloads {
        for window in [0, args.window_ms] {
            let row = bench.run(workload, window).await?;
            eprintln!("done: {} window {} ms", row.name, row.window_ms);
            rows.push(row);
        }
    }
    print(&rows);
    Ok(())
}

struct Bench<'a> {
    args: &'a Args,
    reader: PathBuf,
    client: aws_sdk_sqs::Client,
    sink: CountingSink,
    sink_url: String,
    /// Where the (zero-delay) call-counting proxy runs: beside the sink, as nothing is timed here
    /// but CPU and calls.
    runtimes: Runtimes,
}

impl Bench<'_> {
    async fn run(&self, workload: Workload, window_ms: u32) -> Result<Row, String> {
        let url = queue::create(&self.client, &format!("bench-cost-{}", fastrand::u32(..))).await?;
        let result = self.measure(workload, window_ms, &url).await;
        queue::delete(&self.client, &url).await;
        result
    }

    async fn measure(&self, workload: Workload, window_ms: u32, url: &str) -> Result<Row, String> {
        let a = self.args;
        let messages = match workload {
            Workload::Drain => a.backlog,
            Workload::Trickle => a.trickle,
            Workload::Idle => 0,
        };
        if matches!(workload, Workload::Drain) {
            queue::fill(&self.client, url, messages, 0).await?;
        }
        self.sink.reset();
        let watched = Arc::new(Watched::default());
        let proxy = rtt::proxy(&self.runtimes, &self.args.endpoint, Duration::ZERO, Some(watched.clone()))?;
        let calls = &watched.calls;
        let admin = free_port()?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut child = self.spawn(url, &proxy.url(), admin, window_ms, &dir)?;
        let outcome = async {
            wait_ready(admin).await?;
            let started = Instant::now();
            let (base_proxy, base_metric) = match workload {
                Workload::Drain => {
                    self.wait_delivered(url, messages).await.map(|()| (Calls::default(), 0))?
                }
                Workload::Trickle => {
                    self.send_trickle(url).await?;
                    self.wait_delivered(url, messages).await.map(|()| (Calls::default(), 0))?
                }
                Workload::Idle => {
                    // Let the first long polls (20 s) come back empty: the steady state is what costs.
                    tokio::time::sleep(Duration::from_secs(22)).await;
                    let base = (calls.snapshot(), scrape(admin).await?);
                    tokio::time::sleep(Duration::from_secs(a.idle_seconds)).await;
                    base
                }
            };
            let seconds = match workload {
                Workload::Idle => a.idle_seconds as f64,
                _ => started.elapsed().as_secs_f64(),
            };
            let metric = scrape(admin).await? - base_metric;
            let proxy_calls = since(calls.snapshot(), base_proxy);
            let name = match workload {
                Workload::Drain => format!("drain {messages} backlog"),
                Workload::Trickle => format!("{messages} at {}/s, one by one", a.rate),
                Workload::Idle => "idle, 1 reader".to_owned(),
            };
            let latency = self.sink.percentiles(&[50.0, 99.0]);
            Ok::<Row, String>(Row { name, window_ms, messages, proxy: proxy_calls, metric, seconds, latency })
        }
        .await;
        child::stop(&mut child);
        outcome.map_err(|e| {
            let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
            format!("{e}\nreader log:\n{log}")
        })
    }

    /// Every message at the sink, the queue empty, and the last deletes' linger over.
    async fn wait_delivered(&self, url: &str, messages: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.sink.figures().0 < messages {
            if Instant::now() > deadline {
                return Err(format!("only {} of {messages} delivered in 300 s", self.sink.figures().0));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        queue::wait_empty(&self.client, url, Duration::from_secs(60)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    /// One SendMessage at a time at the rate, each body its send time in microseconds.
    async fn send_trickle(&self, url: &str) -> Result<(), String> {
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / self.args.rate.max(1)));
        for _ in 0..self.args.trickle {
            tick.tick().await;
            self.client
                .send_message()
                .queue_url(url)
                .message_body(sink::now_us().to_string())
                .send()
                .await
                .map_err(|e| format!("SendMessage: {e}"))?;
        }
        Ok(())
    }

    fn spawn(
        &self,
        url: &str,
        endpoint: &str,
        admin: u16,
        window_ms: u32,
        dir: &tempfile::TempDir,
    ) -> Result<Child, String> {
        let source = dir.path().join("source.yaml");
        let yaml = SourceYaml::bare("bench", url, endpoint)
            .max_messages(10)
            .wait_time(20)
            .batch_window(window_ms)
            .sink("web", Sink::http(&self.sink_url).timeout_ms(5000))
            .yaml();
        std::fs::write(&source, yaml).map_err(|e| e.to_string())?;
        let mut command = Command::new(&self.reader);
        command
            .arg("--source")
            .arg(&source)
            .arg(format!("--admin-addr=127.0.0.1:{admin}"))
            .arg("--shutdown-deadline-seconds=5");
        child::spawn_consumer(&mut command, &dir.path().join("stderr"))
    }
}

/// The calls made after `base` was taken.
fn since(calls: Calls, base: Calls) -> Calls {
    Calls {
        receive: calls.receive - base.receive,
        delete: calls.delete - base.delete,
        visibility: calls.visibility - base.visibility,
        other: calls.other - base.other,
    }
}

/// The reader's own count of its SQS requests, summed over APIs and queues.
async fn scrape(admin: u16) -> Result<u64, String> {
    let text = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .map_err(|e| format!("scrape: {e}"))?
        .text()
        .await
        .map_err(|e| format!("scrape: {e}"))?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("sluice_reader_aws_requests_total{") && l.contains("service=\"sqs\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// Poll `/readyz` (bounded).
async fn wait_ready(admin: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = reqwest::get(format!("http://127.0.0.1:{admin}/readyz")).await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the reader was not ready within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn print(rows: &[Row]) {
    println!(
        "{:<28} {:>7} {:>8} {:>8} {:>7} {:>6} {:>6} {:>9} {:>8} {:>7} {:>8} {:>8}",
        "workload",
        "window",
        "messages",
        "receive",
        "delete",
        "visib",
        "other",
        "req/msg",
        "metric",
        "diff",
        "p50 ms",
        "p99 ms"
    );
    for r in rows {
        let total = r.proxy.total();
        let cost = match r.messages {
            0 => format!("{:.0}/h", total as f64 * 3600.0 / r.seconds),
            n => format!("{:.3}", total as f64 / n as f64),
        };
        let diff = match total {
            0 => "-".to_owned(),
            t => format!("{:+.2}%", (r.metric as f64 - t as f64) * 100.0 / t as f64),
        };
        let (p50, p99) = match &r.latency {
            Some(p) => (format!("{:.0}", p[0]), format!("{:.0}", p[1])),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<28} {:>4} ms {:>8} {:>8} {:>7} {:>6} {:>6} {:>9} {:>8} {:>7} {:>8} {:>8}",
            r.name,
            r.window_ms,
            r.messages,
            r.proxy.receive,
            r.proxy.delete,
            r.proxy.visibility,
            r.proxy.other,
            cost,
            r.metric,
            diff,
            p50,
            p99
        );
    }
    println!(
        "req/msg: every SQS request the proxy saw (startup's GetQueueAttributes included) per message; \
         metric: the reader's own sluice_reader_aws_requests_total{{service=\"sqs\"}} over the same span; \
         diff: metric against proxy. Request counts do not depend on the machine's load; latencies do."
    );
}
