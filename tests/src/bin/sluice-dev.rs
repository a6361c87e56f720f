//! `sluice-dev`: the developer's hands on a local setup, used by `scripts/demo.sh` and by people poking at it.
//!
//! Why a binary and not shell + the AWS CLI: the AWS CLI is not installed on a fresh machine, and the test
//! fixture already knows how to make queues, send numbered messages and count CloudEvents. This wraps
//! that same code ([`sluice_tests::localstack`], [`sluice_tests::sinkserver`]) so the demo and the tests
//! exercise one implementation.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use serde_yaml::Value;
use sluice_crds::SqsSource;
use sluice_tests::localstack::{DEFAULT_ENDPOINT, QueueOptions, SendOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::{SinkServer, SinkStats};
use tokio::signal::unix::{SignalKind, signal};

/// Developer tool for a local Sluice setup (LocalStack queues, a CloudEvents sink).
#[derive(Debug, Parser)]
#[command(name = "sluice-dev")]
struct Args {
    /// SQS endpoint (LocalStack).
    #[arg(long, global = true, env = "SLUICE_LOCALSTACK_ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    endpoint: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a queue and print its URL.
    CreateQueue {
        /// Queue name; `.fifo` is appended for --fifo when missing.
        name: String,
        /// Make a FIFO queue.
        #[arg(long)]
        fifo: bool,
        /// Visibility timeout in seconds.
        #[arg(long)]
        visibility: Option<u32>,
    },
    /// Send numbered messages (`{"seq":N}`) in batches of 10.
    Send {
        queue_url: String,
        /// How many messages.
        #[arg(long)]
        count: usize,
        /// FIFO: spread over this many message groups.
        #[arg(long)]
        groups: Option<u32>,
        /// Messages per second (default: as fast as the endpoint takes them).
        #[arg(long)]
        rate: Option<f64>,
    },
    /// Serve a CloudEvents HTTP sink; print progress each second and totals on Ctrl-C / SIGTERM.
    SinkServer {
        /// Address to listen on (loopback).
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: String,
        /// Also print the first N events (id and body) as they arrive.
        #[arg(long, default_value_t = 0)]
        show: usize,
        /// Answer each event after this many milliseconds (a receiver doing real work). Default 0.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Also write the sink's URL to this file once it listens (useful with port 0).
        #[arg(long)]
        url_file: Option<PathBuf>,
    },
    /// Print a queue's approximate visible / in-flight / delayed counts.
    Counts { queue_url: String },
    /// Write an SqsSource YAML from an example, pointed at a queue and an HTTP sink.
    RenderSource {
        /// Example SqsSource YAML (e.g. deploy/examples/minimal-http.yaml).
        example: PathBuf,
        /// Queue URL for spec.queues[0].
        #[arg(long)]
        queue_url: String,
        /// URL for every HTTP sink.
        #[arg(long)]
        sink_url: String,
        /// Set spec.scaling to MIN:MAX replicas, checked every 2 s, scaling down after 10 s (for demos).
        #[arg(long, value_name = "MIN:MAX")]
        replicas: Option<String>,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Server-side apply a CustomResourceDefinition or SqsSource manifest to the cluster in KUBECONFIG
    /// (so the demo needs no kubectl).
    Apply {
        /// YAML manifest (one document).
        file: PathBuf,
        /// Namespace for namespaced objects.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
    /// Print one line about an SqsSource and its reader Deployment (Ready condition, replicas).
    SourceStatus {
        name: String,
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The process runner's pods.json: also count the reader processes running for the source.
        #[arg(long)]
        pods: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = sqs_client(&args.endpoint);
    match args.command {
        Command::CreateQueue { name, fifo, visibility } => {
            let name = if fifo && !name.ends_with(".fifo") { format!("{name}.fifo") } else { name };
            let options = QueueOptions { visibility_timeout: visibility, ..QueueOptions::default() };
            println!("{}", TestQueue::create_named(&client, &name, &options).await?.url);
        }
        Command::Send { queue_url, count, groups, rate } => {
            send(
                &TestQueue::open(&client, &queue_url),
                count,
                SendOptions { groups, ..SendOptions::default() },
                rate,
            )
            .await?;
        }
        Command::SinkServer { addr, show, latency_ms, url_file } => {
            sink_server(&addr, show, Duration::from_millis(latency_ms), url_file).await?
        }
        Command::Counts { queue_url } => {
            let counts = TestQueue::open(&client, &queue_url).approximate_counts().await?;
            println!("visible={} in_flight={} delayed={}", counts.visible, counts.in_flight, counts.delayed);
        }
        Command::Apply { file, namespace } => apply(&file, &namespace).await?,
        Command::SourceStatus { name, namespace, pods } => {
            let mut line = String::new();
            if let Some(pods) = pods {
                line = format!("processes={} ", running_readers(&pods, &format!("{name}-reader")));
            }
            println!("{line}{}", source_status(&name, &namespace).await?);
        }
        Command::RenderSource { example, queue_url, sink_url, replicas, out } => {
            let text = std::fs::read_to_string(&example)
                .with_context(|| format!("reading {}", example.display()))?;
            let mut source: Value =
                serde_yaml::from_str(&text).with_context(|| format!("parsing {}", example.display()))?;
            point_source_at(&mut source, &queue_url, &args.endpoint, &sink_url)?;
            if let Some(replicas) = replicas {
                set_scaling(&mut source, &replicas)?;
            }
            let rendered = serde_yaml::to_string(&source)?;
            match out {
                Some(path) => {
                    std::fs::write(&path, rendered).with_context(|| format!("writing {}", path.display()))?
                }
                None => print!("{rendered}"),
            }
        }
    }
    Ok(())
}

/// Field manager of what `sluice-dev apply` writes (as `kubectl apply --server-side` would).
const MANAGER: &str = "sluice-dev";

async fn apply(file: &std::path::Path, namespace: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let doc: Value = serde_yaml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
    let client = kube::Client::try_default().await.context("connecting with KUBECONFIG")?;
    let params = PatchParams::apply(MANAGER).force();
    match kind.as_str() {
        "CustomResourceDefinition" => {
            let crd: CustomResourceDefinition = serde_yaml::from_value(doc)?;
            let name = crd.metadata.name.clone().context("metadata.name is missing")?;
            Api::<CustomResourceDefinition>::all(client).patch(&name, &params, &Patch::Apply(&crd)).await?;
            println!("customresourcedefinition/{name} applied");
        }
        "SqsSource" => {
            let source: SqsSource = serde_yaml::from_value(doc)?;
            let name = source.metadata.name.clone().context("metadata.name is missing")?;
            Api::<SqsSource>::namespaced(client, namespace)
                .patch(&name, &params, &Patch::Apply(&source))
                .await?;
            println!("sqssource/{name} applied");
        }
        other => bail!("sluice-dev apply knows CustomResourceDefinition and SqsSource, not {other:?}"),
    }
    Ok(())
}

/// Reader processes with a pid and not terminating, for one Deployment, from the runner's pods.json.
fn running_readers(pods: &std::path::Path, deployment: &str) -> usize {
    let Ok(text) = std::fs::read_to_string(pods) else { return 0 };
    let Ok(serde_json::Value::Array(pods)) = serde_json::from_str(&text) else { return 0 };
    pods.iter()
        .filter(|p| p.get("deployment").and_then(serde_json::Value::as_str) == Some(deployment))
        .filter(|p| p.get("pid").is_some_and(serde_json::Value::is_u64))
        .filter(|p| !p.get("terminating").and_then(serde_json::Value::as_bool).unwrap_or(false))
        .count()
}

async fn source_status(name: &str, namespace: &str) -> Result<String> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::Api;
    let client = kube::Client::try_default().await.context("connecting with KUBECONFIG")?;
    let Some(source) = Api::<SqsSource>::namespaced(client.clone(), namespace).get_opt(name).await? else {
        return Ok("source=absent".into());
    };
    let status = source.status.unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map_or_else(|| "?".to_owned(), |c| format!("{}({})", c.status, c.reason));
    let deployment = Api::<Deployment>::namespaced(client, namespace)
        .get_opt(&format!("{name}-reader"))
        .await?
        .and_then(|d| d.status)
        .map_or_else(
            || "-".to_owned(),
            |s| format!("{}/{}", s.ready_replicas.unwrap_or(0), s.replicas.unwrap_or(0)),
        );
    // The autoscaler's last decision and why, as the operator wrote it into status.
    let scaled = match (&status.last_scale_time, &status.last_scale_reason) {
        (Some(at), Some(why)) => format!("  scaled at {}: {why}", at.get(11..19).unwrap_or(at)),
        _ => String::new(),
    };
    Ok(format!(
        "Ready={ready} replicas={}/{} desired={} deployment={deployment}{scaled}",
        status.ready_replicas,
        status.replicas,
        status.desired_replicas.map_or_else(|| "-".to_owned(), |d| d.to_string()),
    ))
}

/// Sends `count` messages in batches of 10, paced to `rate` messages/s when given.
async fn send(queue: &TestQueue, count: usize, options: SendOptions, rate: Option<f64>) -> Result<()> {
    if rate.is_some_and(|r| !r.is_finite() || r <= 0.0) {
        bail!("--rate must be a positive number of messages per second");
    }
    let start = Instant::now();
    let mut sent = 0;
    while sent < count {
        if let Some(rate) = rate {
            tokio::time::sleep_until((start + Duration::from_secs_f64(sent as f64 / rate)).into()).await;
        }
        let batch = (count - sent).min(10);
        queue.send_batch_with(batch, options).await?;
        sent += batch;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "sent {sent} messages to {} in {seconds:.1} s ({:.0}/s)",
        queue.name,
        sent as f64 / seconds.max(1e-3)
    );
    Ok(())
}

async fn sink_server(addr: &str, show: usize, latency: Duration, url_file: Option<PathBuf>) -> Result<()> {
    let sink = SinkServer::start_with_latency(addr, latency).await?;
    println!("sink-server listening on {}", sink.url());
    if let Some(path) = url_file {
        std::fs::write(&path, sink.url()).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let (started, mut shown, mut last) = (Instant::now(), 0, SinkStats::default());
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            _ = tick.tick() => {
                for event in sink.events_from(shown).into_iter().take(show.saturating_sub(shown)) {
                    println!("event id={} body={}", event.id, String::from_utf8_lossy(&event.body));
                    shown += 1;
                }
                let now = sink.stats();
                println!(
                    "sink {:>4.0}s: {} +{}/s",
                    started.elapsed().as_secs_f64(),
                    describe(&now),
                    now.accepted - last.accepted
                );
                last = now;
            }
        }
    }
    println!("sink total: {}", describe(&sink.stop().await?));
    Ok(())
}

fn describe(stats: &SinkStats) -> String {
    format!(
        "accepted={} distinct={} duplicates={} rejected={}",
        stats.accepted, stats.distinct, stats.duplicates, stats.rejected
    )
}

/// Points an SqsSource document at one queue (with its endpoint) and every HTTP sink at `sink_url`.
fn point_source_at(source: &mut Value, queue_url: &str, endpoint: &str, sink_url: &str) -> Result<()> {
    let spec = source.get_mut("spec").context("the example has no spec")?;
    let mut queue = serde_yaml::Mapping::new();
    queue.insert("url".into(), queue_url.into());
    queue.insert("endpoint".into(), endpoint.into());
    spec["queues"] = Value::Sequence(vec![Value::Mapping(queue)]);
    let sinks =
        spec.get_mut("sinks").and_then(Value::as_sequence_mut).context("the example has no spec.sinks")?;
    let mut pointed = 0;
    for http in sinks.iter_mut().filter_map(|sink| sink.get_mut("http")) {
        http["url"] = sink_url.into();
        pointed += 1;
    }
    if pointed == 0 {
        bail!("the example has no HTTP sink to point at {sink_url}");
    }
    Ok(())
}

/// Sets `spec.scaling` from `MIN:MAX`, with short intervals so that scaling shows within a demo.
fn set_scaling(source: &mut Value, replicas: &str) -> Result<()> {
    let (min, max) = replicas.split_once(':').context("--replicas takes MIN:MAX, e.g. 1:3")?;
    let (min, max): (i64, i64) =
        (min.trim().parse().context("--replicas MIN")?, max.trim().parse().context("--replicas MAX")?);
    let spec = source.get_mut("spec").context("the example has no spec")?;
    let mut scaling = serde_yaml::Mapping::new();
    scaling.insert("minReplicas".into(), min.into());
    scaling.insert("maxReplicas".into(), max.into());
    scaling.insert("pollIntervalSeconds".into(), 2.into());
    scaling.insert("scaleDownStabilizationSeconds".into(), 10.into());
    scaling.insert("idleCooldownSeconds".into(), 10.into());
    spec["scaling"] = Value::Mapping(scaling);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_replaces_queues_and_http_sink_urls_only() {
        let mut source: Value = serde_yaml::from_str(
            "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {name: orders}\nspec:\n  queues:\n  \
             - {name: orders, region: eu-west-1}\n  - {url: 'https://sqs/2'}\n  sinks:\n  \
             - {name: web, http: {url: 'http://old/', timeoutMs: 500}}\n  - {name: audit, log: {}}\n",
        )
        .unwrap();
        point_source_at(
            &mut source,
            "http://127.0.0.1:4566/queue/q",
            "http://127.0.0.1:4566",
            "http://127.0.0.1:8080/",
        )
        .unwrap();
        let spec = &source["spec"];
        assert_eq!(spec["queues"].as_sequence().unwrap().len(), 1);
        assert_eq!(spec["queues"][0]["url"], "http://127.0.0.1:4566/queue/q");
        assert_eq!(spec["queues"][0]["endpoint"], "http://127.0.0.1:4566");
        assert_eq!(spec["sinks"][0]["http"]["url"], "http://127.0.0.1:8080/");
        assert_eq!(spec["sinks"][0]["http"]["timeoutMs"], 500);
        assert_eq!(source["metadata"]["name"], "orders");
    }

    #[test]
    fn rendering_without_an_http_sink_says_so() {
        let mut source: Value =
            serde_yaml::from_str("spec: {queues: [], sinks: [{name: l, log: {}}]}").unwrap();
        let error = point_source_at(&mut source, "u", "e", "s").unwrap_err();
        assert!(error.to_string().contains("no HTTP sink"), "{error}");
    }
}
