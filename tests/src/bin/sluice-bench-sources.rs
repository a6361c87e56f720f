//! `sluice-bench-sources`: what one operator costs with many SqsSources, most of them idle, on the
//! whole system as processes (LocalStack, a private real control plane with the process kubelet,
//! the operator with the shipped RBAC, reader processes).
//!
//! For each fleet size N (and a one-source cluster to compare the reaction with), on a fresh
//! cluster: N queues and N sources at `minReplicas: 0` (their defaults otherwise), `--busy` of them
//! fed a few messages a second so that they run readers. It prints the time until every source
//! has been Ready (from the first apply), each source's creation-to-Ready time (its wait in the
//! reconciler's queue plus its reconcile), then over a steady window: the operator's CPU (from
//! `/proc/<pid>/stat`) and memory (`VmRSS`, `VmHWM`), the API server's requests per minute by verb
//! and resource (its own `apiserver_request_total`), and the operator's AWS requests per minute per
//! idle source (`sluice_operator_aws_requests_total`). Last, bursts on idle sources, each after a
//! random wait so that it lands anywhere in the scaler's interval: the time from the burst's
//! arrival to the reader Deployment's first `spec.replicas` above zero, split in two: the wait for
//! the scaler's next reading of that queue (where the burst fell in the idle interval: chance, the
//! same at any fleet size while the readings keep their schedule) and the operator's part, from the
//! reading to the scale-up (what a large fleet could slow down).
//!
//! Queues are named with a run-unique prefix and deleted at the end (LocalStack is shared).
//!
//! Run: `cargo build --workspace --bins && target/debug/sluice-bench-sources --sources 100,1000`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use sluice_crds::SqsSource;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::proc_usage::{Usage, cpu_between, cpu_by_command, load_average, machine_busy_seconds};
use sluice_tests::request_counts::{self, RequestCounts};
use sluice_tests::scrape::{address_in_log, metric};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, bin_dir, random_suffix};

#[derive(Debug, Parser)]
#[command(name = "sluice-bench-sources")]
struct Args {
    /// Fleet sizes to measure, each on a fresh cluster.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    sources: Vec<usize>,
    /// Sources of each fleet fed messages throughout (they run readers).
    #[arg(long, default_value_t = 3)]
    busy: usize,
    /// Messages per second sent to each busy queue.
    #[arg(long, default_value_t = 2)]
    busy_rate: u32,
    /// Seconds after every source is Ready before the steady window opens.
    #[arg(long, default_value_t = 45)]
    settle: u64,
    /// Seconds of the steady window.
    #[arg(long, default_value_t = 120)]
    window: u64,
    /// Bursts on idle sources per fleet (and on the one-source cluster).
    #[arg(long, default_value_t = 3)]
    bursts: usize,
    /// Seconds allowed for every source to become Ready.
    #[arg(long, default_value_t = 900)]
    ready_timeout: u64,
    /// An argument for the operator after the bench's own, repeatable
    /// (`--operator-arg=--reconciles-at-once=32`).
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// The operator binary (default: `sluice-operator` beside this one; e.g.
    /// `target/release/sluice-operator` to measure the build that ships).
    #[arg(long)]
    operator: Option<PathBuf>,
    /// Where the systems keep logs and state (default: a fresh temporary directory, kept).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// The figures of one fleet.
#[derive(Default)]
struct Figures {
    sources: usize,
    all_ready: Option<Duration>,
    /// Creation-to-Ready per source, seconds (Ready's lastTransitionTime has second precision).
    to_ready: Vec<f64>,
    cpu_cores: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
    api_per_minute: Vec<((String, String), f64)>,
    gqa_per_idle_minute: f64,
    aws_per_idle_minute: f64,
    reconcile_mean_ms: f64,
    /// `sluice_operator_reconcile_wait_seconds`: (p50, p99 upper bounds, mean), seconds.
    reconcile_wait: (f64, f64, f64),
    bursts: Vec<Burst>,
    load: (f64, f64),
    /// From the first apply until all are Ready: what bounds that time.
    creation: Creation,
}

/// The machine while a fleet is created (first apply until every source has been Ready).
#[derive(Default)]
struct Creation {
    /// The operator's CPU, cores.
    operator_cores: f64,
    /// The whole machine's busy CPU, cores.
    machine_cores: f64,
    /// CPU seconds by command, highest first.
    by_command: Vec<(String, f64)>,
    /// API requests per source by verb and resource, all clients, highest first.
    api_per_source: Vec<((String, String), f64)>,
    /// Requests the API server answered with 429, all clients.
    throttled: f64,
    /// Seconds the API server spent answering, by verb and resource (watches left out), with the
    /// requests' count, highest first.
    api_seconds: Vec<((String, String), f64, f64)>,
}

/// A reading of the machine and the API server, taken at both ends of the creation.
struct Snapshot {
    at: Instant,
    operator: Usage,
    machine: f64,
    by_command: std::collections::BTreeMap<String, f64>,
    api: String,
}

impl Snapshot {
    async fn take(system: &System, pid: u32) -> Result<Self> {
        Ok(Self {
            at: Instant::now(),
            operator: Usage::read(pid)?,
            machine: machine_busy_seconds().unwrap_or(f64::NAN),
            by_command: cpu_by_command(),
            api: apiserver_metrics(system).await?,
        })
    }

    fn creation_until(&self, after: &Self, n: usize) -> Creation {
        let seconds = after.at.duration_since(self.at).as_secs_f64().max(1e-3);
        let (api_before, api_after) = (request_counts::parse(&self.api), request_counts::parse(&after.api));
        Creation {
            operator_cores: (after.operator.cpu_seconds - self.operator.cpu_seconds) / seconds,
            machine_cores: (after.machine - self.machine) / seconds,
            by_command: cpu_between(&self.by_command, &after.by_command),
            // `per_minute` over "minutes" of n: the same deltas, per source.
            api_per_source: request_counts::per_minute(&api_before, &api_after, n.max(1) as f64),
            throttled: request_counts::throttled(&after.api) - request_counts::throttled(&self.api),
            api_seconds: {
                let spent = request_counts::per_minute(
                    &request_counts::seconds(&self.api),
                    &request_counts::seconds(&after.api),
                    1.0,
                );
                let counts: HashMap<_, _> =
                    request_counts::per_minute(&api_before, &api_after, 1.0).into_iter().collect();
                spent
                    .into_iter()
                    .filter(|((verb, _), _)| verb != "WATCH")
                    .map(|(key, s)| {
                        let n = counts.get(&key).copied().unwrap_or(0.0);
                        (key, s, n)
                    })
                    .collect()
            },
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn source_name(i: usize) -> String {
    format!("src-{i:04}")
}

fn source_yaml(name: &str, queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    // Only what a fleet of scale-to-zero sources sets; a short cooldown brings a burst's reader
    // back to zero before the next burst on the one-source cluster.
    SourceYaml::bare(name, &queue.url, endpoint)
        .sink("webhook", Sink::http(sink).timeout_ms(5_000))
        .replicas(0, 2)
        .idle_cooldown(10)
        .scale_down_stabilization(10)
        .yaml()
}

/// Where the operator serves `/metrics` (from its log, which grows with the fleet: read it once
/// per use, not per scrape).
fn operator_metrics_url(system: &System) -> Result<String> {
    let log = system.first_operator_log().context("no operator runs")?;
    let addr = address_in_log(&log, "admin server listening")
        .context("the operator has not said where its admin server listens")?;
    Ok(format!("http://{addr}/metrics"))
}

async fn scrape(http: &reqwest::Client, url: &str) -> Result<String> {
    Ok(http.get(url).send().await?.error_for_status()?.text().await?)
}

/// The operator's `/metrics` text.
async fn operator_metrics(system: &System, http: &reqwest::Client) -> Result<String> {
    scrape(http, &operator_metrics_url(system)?).await
}

/// The samples of the metric family `family` whose labels include `source="<name>"` for one of
/// `names`, each with its whole line.
fn source_samples<'a>(
    text: &'a str,
    family: &'a str,
    names: &'a [String],
) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines()
        .filter(move |l| l.strip_prefix(family).is_some_and(|rest| rest.starts_with('{')))
        .filter(move |l| names.iter().any(|n| l.contains(&format!("source=\"{n}\""))))
        .filter_map(|l| Some((l, l.rsplit(' ').next()?.parse::<f64>().ok()?)))
}

/// `sluice_operator_aws_requests_total` summed over the sources in `names`, for `api` (all APIs
/// when `None`).
fn aws_requests(text: &str, names: &[String], api: Option<&str>) -> f64 {
    source_samples(text, "sluice_operator_aws_requests_total", names)
        .filter(|(l, _)| api.is_none_or(|a| l.contains(&format!("api=\"{a}\""))))
        .map(|(_, value)| value)
        .sum()
}

async fn apiserver_metrics(system: &System) -> Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    Ok(system.client.request_text(request).await?)
}

async fn apiserver_requests(system: &System) -> Result<RequestCounts> {
    Ok(request_counts::parse(&apiserver_metrics(system).await?))
}

/// Waits until every source has said Ready=True; answers each one's creation-to-Ready seconds
/// (its first Ready). A source counts once it has been Ready: a busy one's Ready goes False while
/// its readers start (the bench scales them between 0 and 1 every few seconds), and the moment
/// all of them are Ready together is luck, not the operator's speed.
///
/// From a watch, not a list every few seconds: listing a thousand sources every 2 s cost the
/// machine about half a core, taken from the operator and the API server being measured.
async fn wait_all_ready(api: &Api<SqsSource>, n: usize, timeout: Duration) -> Result<Vec<f64>> {
    let mut ready: HashMap<String, f64> = HashMap::new();
    let events = watcher(api.clone(), watcher::Config::default()).applied_objects();
    let mut events = std::pin::pin!(events);
    let deadline = tokio::time::Instant::now() + timeout;
    while ready.len() < n {
        let Ok(next) = tokio::time::timeout_at(deadline, events.try_next()).await else {
            bail!("{} of {n} sources Ready after {} s", ready.len(), timeout.as_secs());
        };
        let Some(source) = next? else { bail!("the watch of the sources ended") };
        let seconds = (|| {
            let created = source.metadata.creation_timestamp.as_ref()?.0;
            let condition = source.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?;
            (condition.status == "True")
                .then(|| condition.last_transition_time.0.duration_since(created).as_secs_f64())
        })();
        if let Some(seconds) = seconds {
            ready.entry(source.name_any()).or_insert(seconds);
        }
    }
    Ok(ready.into_values().collect())
}

/// One burst on an idle source, split where the operator's part begins.
struct Burst {
    /// From the burst's arrival to the first sample of its Deployment above zero replicas.
    reaction: Duration,
    /// From the arrival to the first scrape of the operator's metrics showing the scaler's reading
    /// of it (`sluice_operator_scaler_queue_visible_messages` above zero): the wait for the
    /// source's next scheduled queue reading, which depends on where in the idle interval the
    /// burst landed, not on the operator. `None` if no scrape showed it before the scale-up.
    read: Option<Duration>,
}

impl Burst {
    /// From the scaler's reading to the scale-up seen: the decision and the Deployment write,
    /// what the operator's load could slow down.
    fn read_to_scale_up(&self) -> Option<Duration> {
        self.read.map(|read| self.reaction.saturating_sub(read))
    }
}

/// One burst on the idle source `name` (`None`: no scale-up within 120 s). The operator's metrics
/// are scraped every 250 ms meanwhile to see when the scaler read the burst; at a thousand sources
/// a scrape is a few hundred kilobytes, which only loads the operator more.
async fn burst(
    system: &System,
    http: &reqwest::Client,
    name: &str,
    queue: &TestQueue,
) -> Result<Option<Burst>> {
    let url = operator_metrics_url(system)?;
    let visible = |text: &str| visible_messages(text, name);
    let read_before = scrape(http, &url).await.ok().and_then(|t| visible(&t));
    queue.send_batch(10).await?;
    let arrived = Instant::now();
    let replicas = async {
        while arrived.elapsed() < Duration::from_secs(120) {
            if system.reader_replicas(name).await?.unwrap_or(0) > 0 {
                return anyhow::Ok(Some(arrived.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(None)
    };
    let read = async {
        // Unknown if the gauge was not at zero before the burst (a reading of an earlier one).
        if read_before.is_none_or(|v| v > 0.0) {
            return std::future::pending().await;
        }
        loop {
            let seen = scrape(http, &url).await.ok().and_then(|t| visible(&t));
            if seen.is_some_and(|v| v > 0.0) {
                return arrived.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let mut read_at = None;
    let mut replicas = std::pin::pin!(replicas);
    let mut read = std::pin::pin!(read);
    loop {
        tokio::select! {
            at = &mut read, if read_at.is_none() => read_at = Some(at),
            reaction = &mut replicas => {
                return Ok(reaction?.map(|reaction| Burst { reaction, read: read_at }));
            }
        }
    }
}

/// `sluice_operator_scaler_queue_visible_messages` of the source `name`, from a `/metrics` text.
fn visible_messages(text: &str, name: &str) -> Option<f64> {
    let names = [name.to_owned()];
    source_samples(text, "sluice_operator_scaler_queue_visible_messages", &names).next().map(|(_, v)| v)
}

/// Sends `rate` messages a second to each busy queue until `stop`.
async fn feed(queues: &[&TestQueue], rate: u32, stop: tokio_util::sync::CancellationToken) {
    let per_batch = usize::try_from(rate.clamp(1, 10)).unwrap_or(1);
    let pause = Duration::from_secs_f64(per_batch as f64 / f64::from(rate.max(1)));
    while !stop.is_cancelled() {
        for queue in queues {
            if let Err(error) = queue.send_batch(per_batch).await {
                eprintln!("feeding {}: {error:#}", queue.name);
            }
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

async fn measure(n: usize, args: &Args, endpoint: &str, state_dir: &Path) -> Result<Figures> {
    let client = sqs_client(endpoint);
    let prefix = format!("bench-src-{}", random_suffix());
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queues: Vec<TestQueue> = stream::iter(0..n)
        .map(|i| {
            let (client, options, name) = (&client, &options, format!("{prefix}-{i:04}"));
            async move { TestQueue::create_named(client, &name, options).await }
        })
        .buffered(16)
        .try_collect()
        .await?;
    let result = measure_on(n, args, endpoint, state_dir, &queues).await;
    let deleted = stream::iter(queues).map(TestQueue::delete).buffer_unordered(16).collect::<Vec<_>>().await;
    let failed = deleted.iter().filter(|d| d.is_err()).count();
    if failed > 0 {
        eprintln!("{failed} of the queues {prefix}-* could not be deleted");
    }
    result
}

async fn measure_on(
    n: usize,
    args: &Args,
    endpoint: &str,
    state_dir: &Path,
    queues: &[TestQueue],
) -> Result<Figures> {
    let busy = if n == 1 { 0 } else { args.busy.min(n) };
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let mut system = System::start(&bin_dir(), &state_dir.join(format!("n{n}"))).await?;
    system.operator_args.clone_from(&args.operator_args);
    if let Some(operator) = &args.operator {
        system.operator_binary = std::path::absolute(operator)?;
    }
    system.start_operator()?;
    let pid = system.operator_pid().context("the operator is not running")?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let sources: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let mut figures = Figures { sources: n, ..Figures::default() };

    let stop_feed = tokio_util::sync::CancellationToken::new();
    let busy_queues: Vec<&TestQueue> = queues.iter().take(busy).collect();
    let feeding = feed(&busy_queues, args.busy_rate, stop_feed.clone());
    let run = async {
        let before = Snapshot::take(&system, pid).await?;
        let started = Instant::now();
        stream::iter(queues.iter().enumerate())
            .map(|(i, queue)| {
                let yaml = source_yaml(&source_name(i), queue, endpoint, &sink.url());
                let system = &system;
                async move { system.apply_source(&yaml).await }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<_>>()
            .await?;
        let applied = started.elapsed();
        figures.to_ready = wait_all_ready(&sources, n, Duration::from_secs(args.ready_timeout)).await?;
        figures.all_ready = Some(started.elapsed());
        figures.creation = before.creation_until(&Snapshot::take(&system, pid).await?, n);
        println!(
            "  {n} sources: applied in {:.1} s, all Ready {:.1} s after the first apply",
            applied.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );

        tokio::time::sleep(Duration::from_secs(args.settle)).await;
        let idle: Vec<String> = (busy..n).map(source_name).collect();
        let (api_before, ops_before, use_before) =
            (apiserver_requests(&system).await?, operator_metrics(&system, &http).await?, Usage::read(pid)?);
        let load_before = load_average().unwrap_or(f64::NAN);
        let window = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.window)).await;
        let minutes = window.elapsed().as_secs_f64() / 60.0;
        let (api_after, ops_after, use_after) =
            (apiserver_requests(&system).await?, operator_metrics(&system, &http).await?, Usage::read(pid)?);
        figures.load = (load_before, load_average().unwrap_or(f64::NAN));
        figures.cpu_cores = (use_after.cpu_seconds - use_before.cpu_seconds) / (minutes * 60.0);
        figures.rss_mib = use_after.rss_bytes as f64 / MIB;
        figures.peak_rss_mib = use_after.peak_rss_bytes as f64 / MIB;
        figures.api_per_minute = request_counts::per_minute(&api_before, &api_after, minutes);
        let per_idle = |api| {
            (aws_requests(&ops_after, &idle, api) - aws_requests(&ops_before, &idle, api))
                / (idle.len().max(1) as f64 * minutes)
        };
        figures.gqa_per_idle_minute = per_idle(Some("GetQueueAttributes"));
        figures.aws_per_idle_minute = per_idle(None);
        let (sum, count) = (
            metric(&ops_after, "sluice_operator_reconcile_duration_seconds_sum").unwrap_or(0.0),
            metric(&ops_after, "sluice_operator_reconcile_duration_seconds_count").unwrap_or(0.0),
        );
        figures.reconcile_mean_ms = if count > 0.0 { sum / count * 1000.0 } else { f64::NAN };
        figures.reconcile_wait = histogram_summary(&ops_after, "sluice_operator_reconcile_wait_seconds");

        // Bursts on idle sources from the end of the fleet (the one-source cluster: its one
        // source again, once back at zero).
        for b in 0..args.bursts {
            let i = if n == 1 { 0 } else { n - 1 - b };
            let name = source_name(i);
            system.wait_idle_at_zero(&name, Duration::from_secs(180)).await?;
            // Anywhere within the idle interval plus one poll interval (30 s + 5 s by default).
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..35_000))).await;
            match burst(&system, &http, &name, &queues[i]).await? {
                Some(burst) => figures.bursts.push(burst),
                None => println!("  {n} sources: burst on {name}: no scale-up within 120 s"),
            }
        }
        anyhow::Ok(())
    };
    let (result, ()) = tokio::join!(
        async {
            let result = run.await;
            stop_feed.cancel();
            result
        },
        feeding
    );
    if let Some(exit) = system.operator_exit() {
        bail!(
            "the operator exited during the run ({exit}); its log is under {}",
            system.state_dir().display()
        );
    }
    drop(system);
    sink.stop().await?;
    result.map(|()| figures)
}

/// The bucket bounds holding the median and the 99th percentile, and the mean, of a histogram in a
/// `/metrics` text.
fn histogram_summary(text: &str, name: &str) -> (f64, f64, f64) {
    let prefix = format!("{name}_bucket{{le=\"");
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| {
            let (le, count) = l.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |b| b.1);
    let bound = |q: f64| buckets.iter().find(|b| b.1 >= q * total).map_or(f64::NAN, |b| b.0);
    let sum = metric(text, &format!("{name}_sum")).unwrap_or(f64::NAN);
    (bound(0.5), bound(0.99), if total > 0.0 { sum / total } else { f64::NAN })
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

fn seconds(values: impl Iterator<Item = Duration>) -> Vec<f64> {
    values.map(|d| d.as_secs_f64()).collect()
}

fn print_table(all: &[Figures]) {
    let row = |label: &str, cell: &dyn Fn(&Figures) -> String| {
        let cells: Vec<String> = all.iter().map(|f| format!("{:>22}", cell(f))).collect();
        println!("{label:<44}{}", cells.join(""));
    };
    row("sources", &|f| f.sources.to_string());
    row("all Ready after first apply (goal ≤ 120 s)", &|f| {
        f.all_ready.map_or_else(|| "-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
    });
    row("creation to Ready p50 / p99 / max", &|f| {
        format!(
            "{:.0} / {:.0} / {:.0} s",
            percentile(&f.to_ready, 0.5),
            percentile(&f.to_ready, 0.99),
            percentile(&f.to_ready, 1.0)
        )
    });
    row("reconcile wait p50 / p99 ≤ (mean), metric", &|f| {
        let (p50, p99, mean) = f.reconcile_wait;
        format!("{p50} / {p99} s ({mean:.1})")
    });
    row("reconcile duration, mean", &|f| format!("{:.0} ms", f.reconcile_mean_ms));
    row("operator CPU (goal ≤ 0.2 core)", &|f| format!("{:.3} cores", f.cpu_cores));
    row("operator RSS steady / peak (goal ≤ 256)", &|f| {
        format!("{:.0} / {:.0} MiB", f.rss_mib, f.peak_rss_mib)
    });
    row("GetQueueAttributes/min per idle source", &|f| format!("{:.2}", f.gqa_per_idle_minute));
    row("AWS requests/min per idle source (≤ 2)", &|f| format!("{:.2}", f.aws_per_idle_minute));
    row("API requests/min, all clients", &|f| {
        format!("{:.0}", f.api_per_minute.iter().map(|r| r.1).sum::<f64>())
    });
    let summary = |values: Vec<f64>| {
        format!("{:.1} / {:.1} s ({})", percentile(&values, 0.5), percentile(&values, 1.0), values.len())
    };
    let reactions = |f: &Figures| seconds(f.bursts.iter().map(|b| b.reaction));
    let reads = |f: &Figures| seconds(f.bursts.iter().filter_map(|b| b.read));
    let operator_parts = |f: &Figures| seconds(f.bursts.iter().filter_map(Burst::read_to_scale_up));
    row("burst to first scale-up, median / max (n)", &|f| summary(reactions(f)));
    row("  burst to the scaler's reading (phase)", &|f| summary(reads(f)));
    row("  reading to scale-up (the operator)", &|f| summary(operator_parts(f)));
    row("load average (1 min) at window start / end", &|f| format!("{:.1} / {:.1}", f.load.0, f.load.1));
    row("during creation: operator / machine CPU", &|f| {
        format!("{:.2} / {:.2} cores", f.creation.operator_cores, f.creation.machine_cores)
    });
    row("during creation: API requests per source", &|f| {
        format!("{:.1}", f.creation.api_per_source.iter().map(|r| r.1).sum::<f64>())
    });
    row("during creation: 429s from the API server", &|f| format!("{:.0}", f.creation.throttled));
    for f in all {
        let each: Vec<String> = f
            .bursts
            .iter()
            .map(|b| match (b.read, b.read_to_scale_up()) {
                (Some(read), Some(operator)) => format!(
                    "{:.1} = {:.1} + {:.1}",
                    b.reaction.as_secs_f64(),
                    read.as_secs_f64(),
                    operator.as_secs_f64()
                ),
                _ => format!("{:.1}", b.reaction.as_secs_f64()),
            })
            .collect();
        println!("bursts on {} source(s), s (scale-up = reading + operator): {}", f.sources, each.join(", "));
    }
    for f in all.iter().filter(|f| f.sources > 1) {
        println!("CPU seconds by command during the creation of {} sources (top 8):", f.sources);
        for (command, seconds) in f.creation.by_command.iter().take(8) {
            println!("  {command:<24} {seconds:>8.1}");
        }
        println!(
            "API server time by request during the creation of {} sources (top 12: seconds, requests, mean):",
            f.sources
        );
        for ((verb, resource), seconds, n) in f.creation.api_seconds.iter().take(12) {
            let mean_ms = if *n > 0.0 { seconds / n * 1000.0 } else { f64::NAN };
            println!("  {verb:<8} {resource:<40} {seconds:>8.1} s {n:>7.0} {mean_ms:>7.1} ms");
        }
        println!(
            "API requests per source during the creation of {} sources (top 16, all clients):",
            f.sources
        );
        for ((verb, resource), per) in f.creation.api_per_source.iter().take(16) {
            println!("  {verb:<8} {resource:<40} {per:>8.2}");
        }
        println!(
            "API requests per minute over the steady window, {} sources (top 12, all clients):",
            f.sources
        );
        for ((verb, resource), rate) in f.api_per_minute.iter().take(12) {
            println!("  {verb:<8} {resource:<40} {rate:>8.1}");
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => tempfile::Builder::new().prefix("sluice-bench-sources-").tempdir()?.keep(),
    };
    let endpoint = LocalStack::ensure().await?;
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "sluice-bench-sources: fleets {:?} plus one source, {} busy at {} msg/s, steady window {} s \
         after {} s settling, {} bursts each; operator {} {:?}; {cores} cores, load average {:.1}; \
         state under {}",
        args.sources,
        args.busy,
        args.busy_rate,
        args.window,
        args.settle,
        args.bursts,
        args.operator
            .as_deref()
            .map_or_else(|| bin_dir().join("sluice-operator"), Path::to_path_buf)
            .display(),
        args.operator_args,
        load_average().unwrap_or(f64::NAN),
        state_dir.display()
    );
    let mut all = Vec::new();
    for n in std::iter::once(1).chain(args.sources.iter().copied()) {
        println!("measuring {n} source(s) on a fresh cluster");
        match measure(n, &args, &endpoint, &state_dir).await {
            Ok(figures) => all.push(figures),
            Err(error) => println!("  {n} sources: not measured: {error:#}"),
        }
    }
    print_table(&all);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_requests_of_the_named_sources_only() {
        let text = "sluice_operator_aws_requests_total{namespace=\"e\",source=\"src-0001\",service=\"sqs\",api=\"GetQueueAttributes\",queue=\"q\"} 4\n\
                    sluice_operator_aws_requests_total{namespace=\"e\",source=\"src-0002\",service=\"sqs\",api=\"GetQueueUrl\",queue=\"q\"} 1\n\
                    sluice_operator_aws_requests_total{namespace=\"e\",source=\"src-0003\",service=\"sqs\",api=\"GetQueueAttributes\",queue=\"q\"} 9\n";
        let names = ["src-0001".to_owned(), "src-0002".to_owned()];
        assert_eq!(aws_requests(text, &names, Some("GetQueueAttributes")), 4.0);
        assert_eq!(aws_requests(text, &names, None), 5.0);
    }

    #[test]
    fn the_visible_messages_of_one_source() {
        let text = "sluice_operator_scaler_queue_visible_messages{namespace=\"e\",source=\"src-0010\"} 7\n\
                    sluice_operator_scaler_queue_visible_messages{namespace=\"e\",source=\"src-0001\"} 0\n";
        assert_eq!(visible_messages(text, "src-0001"), Some(0.0));
        assert_eq!(visible_messages(text, "src-0010"), Some(7.0));
        assert_eq!(visible_messages(text, "src-0002"), None);
    }

    #[test]
    fn the_operators_part_of_a_burst() {
        let burst =
            Burst { reaction: Duration::from_millis(12_500), read: Some(Duration::from_millis(12_000)) };
        assert_eq!(burst.read_to_scale_up(), Some(Duration::from_millis(500)));
        let unseen = Burst { read: None, ..burst };
        assert_eq!(unseen.read_to_scale_up(), None);
    }

    #[test]
    fn a_histogram_summarised_by_its_buckets() {
        let text = "w_bucket{le=\"0.5\"} 10\nw_bucket{le=\"1.0\"} 98\nw_bucket{le=\"2.0\"} 100\nw_bucket{le=\"+Inf\"} 100\nw_sum 75\nw_count 100\n";
        assert_eq!(histogram_summary(text, "w"), (1.0, 2.0, 0.75));
    }

    #[test]
    fn percentiles_of_a_few_values() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 1.0), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
