//! `sluice-bench-epochs`: what exactly-once costs. Side by side on the same LocalStack, the reader's
//! throughput under `exactlyOnce` (checkpoint epochs: deletes wait for the epoch's commit) as a ratio
//! of its throughput under `atLeastOnce` (delete on acknowledgement), and the commit latency: from an
//! epoch's pre-commit (the epoch closed and every message in it was settled) to its deletes confirmed.
//!
//! Each run makes a fresh standard queue, fills it with N messages (not timed), starts one standalone
//! `sluice-reader` process (`--source FILE`, in-process epoch coordinator), and times from the first
//! received message (its `/metrics`) until SQS reports the queue empty (visible + in flight = 0).
//! Then it scrapes `sluice_reader_commit_latency_seconds` and stops the reader by its PID. Rounds
//! alternate which guarantee goes first, so neighbouring runs share the machine's state; the report
//! gives the ratio of medians and the per-round ratios, per sink (`http`: idempotent on `ce-id`, a
//! loopback server in this process; `s3`: one multipart upload per epoch, completed on commit).
//!
//! Run: `cargo build --workspace --bins && target/debug/sluice-bench-epochs --runs 3` (add
//! `--release` builds for absolute figures; the ratio is the figure that matters).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_tests::localstack::{LocalStack, TestQueue, s3_client, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::bin_dir;

const BUCKET: &str = "sluice-bench-epochs";
/// Longest a single run may take before the benchmark gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Parser)]
#[command(name = "sluice-bench-epochs")]
struct Args {
    /// Rounds; each runs both guarantees for each sink.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Messages per run.
    #[arg(long, default_value_t = 5000)]
    messages: usize,
    /// Sinks to measure: http, s3, or both.
    #[arg(long, default_value = "both")]
    sink: String,
    /// checkpointIntervalSeconds for exactlyOnce.
    #[arg(long, default_value_t = 2)]
    interval: u32,
    /// Pollers in the reader.
    #[arg(long, default_value_t = 4)]
    pollers: u32,
    /// The reader binary (default: next to this one).
    #[arg(long)]
    reader: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Guarantee {
    AtLeastOnce,
    ExactlyOnce,
}

impl Guarantee {
    fn spec(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "atLeastOnce",
            Guarantee::ExactlyOnce => "exactlyOnce",
        }
    }
}

#[derive(Debug)]
struct Sample {
    sink: &'static str,
    guarantee: Guarantee,
    round: usize,
    seconds: f64,
    messages: usize,
    cpu_seconds: f64,
    commit: Option<Latency>,
}

/// From the reader's histogram: mean, and the bucket bounds holding the median and the 99th percentile.
#[derive(Debug, Clone, Copy)]
struct Latency {
    epochs: u64,
    mean: f64,
    p50_le: f64,
    p99_le: f64,
}

struct Bench {
    args: Args,
    reader: PathBuf,
    endpoint: String,
    sqs: aws_sdk_sqs::Client,
    http: SinkServer,
    work: tempfile::TempDir,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let reader = match &args.reader {
        Some(path) => path.clone(),
        None => bin_dir().join("sluice-reader"),
    };
    if !reader.is_file() {
        bail!("{} not found: run `cargo build --workspace --bins` first, or pass --reader", reader.display());
    }
    let sinks: Vec<&'static str> = match args.sink.as_str() {
        "http" => vec!["http"],
        "s3" => vec!["s3"],
        "both" => vec!["http", "s3"],
        other => bail!("--sink {other}: use http, s3 or both"),
    };
    let endpoint = LocalStack::ensure().await?;
    let s3 = s3_client(&endpoint);
    let _ = s3.create_bucket().bucket(BUCKET).send().await;
    let bench = Bench {
        sqs: sqs_client(&endpoint),
        http: SinkServer::start("127.0.0.1:0").await?,
        work: tempfile::tempdir()?,
        reader,
        endpoint,
        args,
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "sluice-bench-epochs: {} messages per run, {} rounds, {} pollers, checkpoint interval {} s",
        bench.args.messages, bench.args.runs, bench.args.pollers, bench.args.interval
    );
    println!("  LocalStack {}; reader {}", bench.endpoint, bench.reader.display());
    println!("  load average at start {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    println!(
        "{:<5} {:<12} {:>5} {:>9} {:>8} {:>7} {:>7} {:>10} {:>9} {:>9}",
        "sink", "guarantee", "round", "seconds", "msgs/s", "cpu-s", "epochs", "commit-avg", "p50<=", "p99<="
    );
    let mut samples = Vec::new();
    for round in 0..bench.args.runs {
        for sink in &sinks {
            let order = if round % 2 == 0 {
                [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce]
            } else {
                [Guarantee::ExactlyOnce, Guarantee::AtLeastOnce]
            };
            for guarantee in order {
                let sample = bench.once(sink, guarantee, round).await?;
                line(&sample);
                samples.push(sample);
            }
        }
    }
    for sink in &sinks {
        summary(sink, &samples);
    }
    Ok(())
}

impl Bench {
    async fn once(&self, sink: &'static str, guarantee: Guarantee, round: usize) -> Result<Sample> {
        let queue = TestQueue::create(&self.sqs, "bench-epochs", false).await?;
        queue.send_batch(self.args.messages).await?;
        let dir = self.work.path().join(format!("{sink}-{}-{round}", guarantee.spec()));
        std::fs::create_dir_all(&dir)?;
        let source = dir.join("source.yaml");
        std::fs::write(
            &source,
            self.source_yaml(sink, guarantee, &queue.url, &format!("{}-{round}", guarantee.spec())),
        )?;
        let admin_file = dir.join("admin-addr");
        let mut child = self.spawn(&source, &admin_file, &dir)?;
        let result = self.measure(&mut child, &queue, &admin_file).await;
        stop(&mut child);
        queue.delete().await?;
        let (seconds, cpu_seconds, commit) = result
            .with_context(|| format!("run {sink} {} {round}; logs in {}", guarantee.spec(), dir.display()))?;
        Ok(Sample { sink, guarantee, round, seconds, messages: self.args.messages, cpu_seconds, commit })
    }

    async fn measure(
        &self,
        child: &mut Child,
        queue: &TestQueue,
        admin_file: &Path,
    ) -> Result<(f64, f64, Option<Latency>)> {
        let limit = Instant::now() + RUN_LIMIT;
        let admin = loop {
            if let Ok(addr) = std::fs::read_to_string(admin_file)
                && !addr.trim().is_empty()
            {
                break addr.trim().to_owned();
            }
            if let Some(status) = child.try_wait()? {
                bail!("the reader exited before it served its admin address: {status}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let metrics_url = format!("http://{admin}/metrics");
        let http = reqwest::Client::new();
        let started = loop {
            let text = http.get(&metrics_url).send().await?.text().await?;
            if metric(&text, "sluice_reader_received_messages_total").unwrap_or(0.0) > 0.0 {
                break Instant::now();
            }
            if Instant::now() > limit {
                bail!("nothing received within {RUN_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let pid = child.id();
        let cpu_start = cpu_seconds(pid)?;
        loop {
            let counts = queue.approximate_counts().await?;
            if counts.visible == 0 && counts.in_flight == 0 {
                break;
            }
            if Instant::now() > limit {
                bail!("queue not empty within {RUN_LIMIT:?}: {counts:?}");
            }
            if let Some(status) = child.try_wait()? {
                bail!("the reader exited during the run: {status}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid)? - cpu_start;
        let text = http.get(&metrics_url).send().await?.text().await?;
        Ok((seconds, cpu, latency(&text)))
    }

    fn source_yaml(&self, sink: &str, guarantee: Guarantee, queue_url: &str, prefix: &str) -> String {
        let sink = match sink {
            "http" => Sink::http(&self.http.url()).concurrency(40),
            _ => Sink::s3(BUCKET, &format!("bench/{prefix}/{}", std::process::id()), &self.endpoint),
        };
        let source = SourceYaml::bare("bench-epochs", queue_url, &self.endpoint)
            .pollers(self.args.pollers)
            .max_messages(10)
            .wait_time(1)
            .visibility_timeout(60);
        let source = match guarantee {
            Guarantee::ExactlyOnce => source.exactly_once(self.args.interval),
            Guarantee::AtLeastOnce => source.at_least_once(),
        };
        source.sink("out", sink).yaml()
    }

    fn spawn(&self, source: &Path, admin_file: &Path, dir: &Path) -> Result<Child> {
        let log = std::fs::File::create(dir.join("reader.log"))?;
        Ok(Command::new(&self.reader)
            .arg("--source")
            .arg(source)
            .args(["--admin-addr", "127.0.0.1:0", "--admin-addr-file"])
            .arg(admin_file)
            .envs(sluice_tests::system::aws_test_env())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?)
    }
}

/// SIGTERM to the reader we started, by its PID, then wait (SIGKILL after 30 s).
fn stop(child: &mut Child) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// User + system CPU seconds of a process (all threads), from /proc.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').context("malformed /proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).context("no utime")?.parse::<u64>()?
        + fields.get(12).context("no stime")?.parse::<u64>()?;
    Ok(ticks as f64 / clock_ticks() as f64)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// The sum of `name`'s series (labelled or not), if it has any.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name).filter(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

/// The commit latency histogram, if any epoch committed.
fn latency(text: &str) -> Option<Latency> {
    let count = metric(text, "sluice_reader_commit_latency_seconds_count")?;
    let sum = metric(text, "sluice_reader_commit_latency_seconds_sum")?;
    if count == 0.0 {
        return None;
    }
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("sluice_reader_commit_latency_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, value) = l.split_once("\"}")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, value.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let quantile =
        |q: f64| buckets.iter().find(|(_, c)| *c >= q * count).map_or(f64::INFINITY, |(le, _)| *le);
    Some(Latency { epochs: count as u64, mean: sum / count, p50_le: quantile(0.5), p99_le: quantile(0.99) })
}

fn line(s: &Sample) {
    let (epochs, mean, p50, p99) = match s.commit {
        Some(l) => {
            (l.epochs.to_string(), format!("{:.3}", l.mean), format!("{}", l.p50_le), format!("{}", l.p99_le))
        }
        None => ("-".into(), "-".into(), "-".into(), "-".into()),
    };
    println!(
        "{:<5} {:<12} {:>5} {:>9.2} {:>8.0} {:>7.2} {:>7} {:>10} {:>9} {:>9}",
        s.sink,
        s.guarantee.spec(),
        s.round,
        s.seconds,
        s.messages as f64 / s.seconds,
        s.cpu_seconds,
        epochs,
        mean,
        p50,
        p99
    );
}

fn summary(sink: &str, samples: &[Sample]) {
    let rate = |g: Guarantee| -> Vec<f64> {
        samples
            .iter()
            .filter(|s| s.sink == sink && s.guarantee == g)
            .map(|s| s.messages as f64 / s.seconds)
            .collect()
    };
    let (eo, alo) = (rate(Guarantee::ExactlyOnce), rate(Guarantee::AtLeastOnce));
    let per_round: Vec<f64> = eo.iter().zip(&alo).map(|(e, a)| (e / a * 1000.0).round() / 1000.0).collect();
    let commits: Vec<f64> =
        samples.iter().filter(|s| s.sink == sink).filter_map(|s| s.commit.map(|c| c.mean)).collect();
    println!(
        "{sink}: median throughput exactlyOnce {:.0} msgs/s, atLeastOnce {:.0} msgs/s",
        median(&eo),
        median(&alo)
    );
    println!(
        "{sink}: ratio of medians exactlyOnce/atLeastOnce {:.3}; per-round ratios {per_round:?} (median {:.3}); target >= 0.85: {}",
        median(&eo) / median(&alo),
        median(&per_round),
        if median(&per_round) >= 0.85 { "met" } else { "NOT met" }
    );
    println!(
        "{sink}: commit latency (pre-commit to deletes confirmed), median of run means {:.3} s",
        median(&commits)
    );
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
