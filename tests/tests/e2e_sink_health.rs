//! End to end, as separate processes (LocalStack, the local control plane with its process runner,
//! the operator, one reader process per source): the lasting faults a user meets, each on its
//! own source in one system, held for 30 s and then removed:
//! - a sink bucket that does not exist,
//! - a dead-letter queue that does not exist while the sink refuses every message as poison,
//! - an HTTP sink that refuses every message (400) and no dead-letter sink,
//! - an HTTP sink that answers 503 to everything (an outage), read by 3 readers from a queue whose
//!   RedrivePolicy dead-letters after 3 receives: the readers hold the messages and their sink's
//!   circuit opens, so nothing reaches that dead-letter queue and every message arrives after,
//! - a payload endpoint (`spec.payload.s3.endpoint`, Extended Client pointers) that refuses every
//!   connection: the reader holds the messages for S3, and the condition names the payload
//!   fetches (reason `PayloadFetchFailing`) rather than a sink.
//!
//! For each: the reader's `/readyz` turns 503 (at once when a target is missing: its start check
//! finds it; else `spec.delivery.unreadyAfterSeconds`, 5 s here, after the first failure) and the
//! source's `SinksHealthy` condition False (with a Warning event) within that time plus one report
//! (at most 5 s) and one operator tick (5 s); each message is received at most 5 times in the 30 s (released
//! 1 s after its first receive, doubling: 1 + 2 + 4 + 8 + 16 s); the WARN lines are rate-limited (one
//! per sink and kind per 10 s at most); once the fault is removed both turn back (a Normal event)
//! and every message reaches its sink, the dead-letter queue included, and leaves the source queue.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::http::StatusCode;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::ListParams;
use sluice_crds::SqsSource;
use sluice_tests::localstack::{LocalStack, QueueOptions, Redrive, TestQueue, s3_client, sqs_client};
use sluice_tests::outage::Outage;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const MESSAGES: usize = 5;
/// `spec.delivery.unreadyAfterSeconds` of every source here.
const UNREADY_AFTER_SECONDS: u32 = 5;
/// How long each fault is held before it is removed.
const FAULT: Duration = Duration::from_secs(30);
/// The most receives of one message within `window` of its first: a release comes back after 1, 2,
/// 4, 8, 16 ... s, so the n-th receive is at least 2^(n-1) - 1 s after the first (5 in 30 s, 6 from
/// 31 s on). Worked out from the window actually measured, so a slow scrape cannot fail the test.
fn receives_within(window: Duration) -> f64 {
    1.0 + (window.as_secs_f64() + 1.0).log2().floor()
}
/// A body only the dead-letter case sends once the fault is gone; the sink refuses the others.
const CANARY: &str = "canary";
/// What every body [`TestQueue::send_batch`] sends contains, and [`CANARY`] does not.
const POISON_MARKER: &str = "seq";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    MissingBucket,
    MissingDeadLetterQueue,
    RejectingSink,
    SinkOutage,
    PayloadOutage,
}

impl Fault {
    fn source(self) -> &'static str {
        match self {
            Fault::MissingBucket => "nobucket",
            Fault::MissingDeadLetterQueue => "nodlq",
            Fault::RejectingSink => "reject",
            Fault::SinkOutage => "outage",
            Fault::PayloadOutage => "nofetch",
        }
    }

    /// Messages sent: a few, or for the outage enough to spread over its readers.
    fn messages(self) -> usize {
        match self {
            Fault::SinkOutage => OUTAGE_MESSAGES,
            _ => MESSAGES,
        }
    }

    fn replicas(self) -> i32 {
        match self {
            Fault::SinkOutage => 3,
            _ => 1,
        }
    }
}

/// Messages of the outage case, and the receives after which its queue dead-letters a message.
const OUTAGE_MESSAGES: usize = 100;
const MAX_RECEIVE_COUNT: u32 = 3;

/// One source under one fault, with what it delivers to.
struct Case {
    fault: Fault,
    endpoint: String,
    queue: TestQueue,
    bucket: String,
    /// The dead-letter queue's name and URL (it exists only once the fault is removed; for the
    /// outage, the queue's RedrivePolicy target, there all along).
    dead_letter: (String, String),
    sink: SinkServer,
    /// The payload outage's S3 endpoint, refusing until the fault is removed.
    s3_port: tokio::sync::Mutex<Outage>,
    s3_url: String,
}

/// What one case showed.
struct Figures {
    to_unready: Duration,
    to_false: Duration,
    false_message: String,
    receives_per_message: f64,
    receive_bound: f64,
    warnings: BTreeMap<String, usize>,
    warn_secs: u64,
    to_ready: Duration,
    to_true: Duration,
}

impl Case {
    async fn create(fault: Fault, endpoint: &str) -> Result<Self> {
        let sqs = sqs_client(endpoint);
        let mut options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
        let dead = TestQueue::create_with(&sqs, "e2e-health-dlq", false, &options).await?;
        let dead_letter = (dead.name.clone(), dead.url.clone());
        if fault == Fault::SinkOutage {
            let arn = dead.arn().await?;
            options.redrive = Some(Redrive { dead_letter_arn: arn, max_receive_count: MAX_RECEIVE_COUNT });
            options.visibility_timeout = Some(10);
        } else {
            dead.delete().await?;
        }
        let queue =
            TestQueue::create_with(&sqs, &format!("e2e-health-{}", fault.source()), false, &options).await?;
        let sink = SinkServer::start("127.0.0.1:0").await?;
        match fault {
            Fault::MissingDeadLetterQueue => sink.refuse(StatusCode::BAD_REQUEST, POISON_MARKER),
            Fault::RejectingSink => sink.refuse(StatusCode::BAD_REQUEST, ""),
            Fault::SinkOutage => sink.refuse(StatusCode::SERVICE_UNAVAILABLE, ""),
            Fault::MissingBucket | Fault::PayloadOutage => {}
        }
        let bucket = format!("e2e-health-{}", fastrand::u64(..));
        let s3_port = Outage::down(endpoint)?;
        let s3_url = s3_port.endpoint();
        let s3_port = tokio::sync::Mutex::new(s3_port);
        Ok(Self { fault, endpoint: endpoint.to_owned(), queue, bucket, dead_letter, sink, s3_port, s3_url })
    }

    fn yaml(&self) -> String {
        let endpoint = &self.endpoint;
        let web = || Sink::http(&self.sink.url()).timeout_ms(2000);
        let source = SourceYaml::bare(self.fault.source(), &self.queue.url, endpoint)
            .namespace("default")
            .wait_time(1)
            .log_level("info");
        let source = match self.fault {
            Fault::MissingBucket => source.sink("archive", Sink::s3_bucket(&self.bucket, endpoint)),
            Fault::MissingDeadLetterQueue => {
                source.sink("web", web()).dead_letter("dlq", Sink::sqs(&self.dead_letter.1, endpoint))
            }
            Fault::RejectingSink | Fault::SinkOutage => source.sink("web", web()),
            Fault::PayloadOutage => {
                source.sink("web", web()).payload_s3(&self.s3_url).payload_region("us-east-1")
            }
        };
        source
            .unready_after(UNREADY_AFTER_SECONDS)
            .retry_max_attempts(1)
            .replicas(self.fault.replicas(), self.fault.replicas())
            .yaml()
    }

    /// Removes the fault. The dead-letter case then waits until every poison message is
    /// dead-lettered and sends one good message: a sink that refused a message counts as failing
    /// until it next accepts one, even when the dead-letter queue took what it refused.
    async fn remove_fault(&self) -> Result<()> {
        match self.fault {
            Fault::MissingBucket => {
                s3_client(&self.endpoint)
                    .create_bucket()
                    .bucket(&self.bucket)
                    .send()
                    .await
                    .context("CreateBucket")?;
            }
            Fault::MissingDeadLetterQueue => {
                let sqs = sqs_client(&self.endpoint);
                let created =
                    sqs.create_queue().queue_name(&self.dead_letter.0).send().await.context("CreateQueue")?;
                ensure!(
                    created.queue_url() == Some(self.dead_letter.1.as_str()),
                    "the dead-letter queue moved"
                );
                wait_empty(&self.queue).await?;
                sqs.send_message()
                    .queue_url(&self.queue.url)
                    .message_body(CANARY)
                    .send()
                    .await
                    .context("SendMessage")?;
            }
            Fault::RejectingSink | Fault::SinkOutage => self.sink.accept_all(),
            Fault::PayloadOutage => {
                self.s3_port.lock().await.restore().await?;
            }
        }
        Ok(())
    }

    /// Sends the case's messages: for the payload outage, Extended Client pointers to objects in
    /// the case's bucket (LocalStack's S3, reached through the refusing port once it forwards).
    async fn send(&self, messages: usize) -> Result<()> {
        if self.fault != Fault::PayloadOutage {
            self.queue.send_batch(messages).await?;
            return Ok(());
        }
        let s3 = s3_client(&self.endpoint);
        s3.create_bucket().bucket(&self.bucket).send().await.context("CreateBucket")?;
        for i in 0..messages {
            let key = format!("payload/{i}.json");
            let object = format!(r#"{{"seq":{i}}}"#).into_bytes();
            s3.put_object().bucket(&self.bucket).key(&key).body(object.into()).send().await?;
            let pointer = serde_json::json!([
                "software.amazon.payloadoffloading.PayloadS3Pointer",
                {"s3BucketName": self.bucket, "s3Key": key}
            ]);
            let send = self.queue.client().send_message().queue_url(&self.queue.url);
            send.message_body(pointer.to_string()).send().await.context("SendMessage")?;
        }
        Ok(())
    }

    /// Every message reached its sink and left the source queue.
    async fn check_nothing_lost(&self) -> Result<String> {
        wait_empty(&self.queue).await?;
        Ok(match self.fault {
            Fault::MissingBucket => {
                let objects = s3_client(&self.endpoint).list_objects_v2().bucket(&self.bucket).send().await?;
                ensure!(!objects.contents().is_empty(), "nothing was written to {}", self.bucket);
                format!("{} objects in the bucket", objects.contents().len())
            }
            Fault::MissingDeadLetterQueue => {
                let dead = TestQueue::open(&sqs_client(&self.endpoint), &self.dead_letter.1);
                let dead_lettered = dead.drain_count().await?;
                ensure!(
                    dead_lettered == MESSAGES,
                    "{dead_lettered} of {MESSAGES} poison messages dead-lettered"
                );
                let stats = self.sink.wait_for_distinct(1, Duration::from_secs(30)).await?;
                dead.delete().await?;
                format!(
                    "{dead_lettered} poison messages in the dead-letter queue, {} good one at the sink",
                    stats.distinct
                )
            }
            Fault::RejectingSink => {
                let stats = self.sink.wait_for_distinct(MESSAGES as u64, Duration::from_secs(30)).await?;
                format!("{} distinct messages at the sink after {} refusals", stats.distinct, stats.refused)
            }
            Fault::PayloadOutage => {
                let stats = self.sink.wait_for_distinct(MESSAGES as u64, Duration::from_secs(30)).await?;
                format!("{} distinct payloads at the sink once S3 answered", stats.distinct)
            }
            Fault::SinkOutage => {
                let want = OUTAGE_MESSAGES as u64;
                let stats = self.sink.wait_for_distinct(want, Duration::from_secs(30)).await?;
                let dead = TestQueue::open(&sqs_client(&self.endpoint), &self.dead_letter.1);
                let dead_lettered = dead.drain_count().await?;
                dead.delete().await?;
                ensure!(dead_lettered == 0, "{dead_lettered} messages reached the queue's dead-letter queue");
                format!(
                    "{} of {want} distinct messages at the sink after {} refusals (503), {dead_lettered} in the dead-letter queue",
                    stats.distinct, stats.refused
                )
            }
        })
    }

    /// Runs the case through the fault and back.
    async fn run(&self, system: &System) -> Result<Figures> {
        let name = self.fault.source();
        system.apply_source(&self.yaml()).await?;
        // Running, not ready: a reader whose target is missing reports unready from its start check,
        // and the kubelet's readiness probe says so.
        system.wait_running_readers(name, self.fault.replicas() as usize, Duration::from_secs(60)).await?;
        if matches!(self.fault, Fault::RejectingSink | Fault::SinkOutage | Fault::PayloadOutage) {
            wait_ready(system, name, true, Duration::from_secs(60)).await?;
        } else {
            // A missing target turns the reader unready at its start check, before any message.
            wait_ready(system, name, false, Duration::from_secs(60)).await?;
        }
        let messages = self.fault.messages();
        self.send(messages).await?;
        let fault = Instant::now();

        let (to_unready, unhealthy) = tokio::try_join!(
            async {
                wait_ready(system, name, false, Duration::from_secs(60)).await.map(|()| fault.elapsed())
            },
            async {
                wait_condition(system, name, "False", Duration::from_secs(60))
                    .await
                    .map(|c| (c, fault.elapsed()))
            },
        )?;
        let (condition, to_false) = unhealthy;
        let reason = if self.fault == Fault::PayloadOutage { "PayloadFetchFailing" } else { "SinkFailing" };
        ensure!(condition.reason == reason, "{name}: reason {}: {}", condition.reason, condition.message);
        if self.fault == Fault::PayloadOutage {
            ensure!(condition.message.contains("payload fetches from S3"), "{name}: {}", condition.message);
        }
        ensure!(!condition.message.contains('\n'), "{name}: not one line: {}", condition.message);
        if self.fault == Fault::MissingBucket {
            ensure!(condition.message.contains(&self.bucket), "{name}: {}", condition.message);
        }
        wait_event(system, name, ("Warning", "SinksUnhealthy")).await?;

        tokio::time::sleep(FAULT.saturating_sub(fault.elapsed())).await;
        let received = reader_metric(system, name, "sluice_reader_received_messages_total").await?;
        let window = fault.elapsed();
        let receives_per_message = received / messages as f64;
        let receive_bound = match self.fault {
            // Held, not released: each message is received once.
            Fault::SinkOutage
            | Fault::MissingBucket
            | Fault::MissingDeadLetterQueue
            | Fault::PayloadOutage => 1.0,
            Fault::RejectingSink => receives_within(window),
        };
        ensure!(
            received <= messages as f64 * receive_bound,
            "{name}: {received} receives of {messages} messages in {window:?} (bound {receive_bound} each); logs under {}",
            system.state_dir().display()
        );

        let fixed = Instant::now();
        self.remove_fault().await?;
        let (to_ready, to_true) = tokio::try_join!(
            async { wait_ready(system, name, true, Duration::from_secs(90)).await.map(|()| fixed.elapsed()) },
            async {
                wait_condition(system, name, "True", Duration::from_secs(90)).await.map(|_| fixed.elapsed())
            },
        )?;
        wait_event(system, name, ("Normal", "SinksHealthy")).await?;
        let warnings = sink_warnings(system, name);
        let warn_secs = fault.elapsed().as_secs();
        // Each reader limits its own lines.
        let bound = (2 + warn_secs as usize / 10) * self.fault.replicas() as usize;
        ensure!(!warnings.is_empty(), "{name}: no WARN line; logs under {}", system.state_dir().display());
        ensure!(
            warnings.values().all(|n| *n <= bound),
            "{name}: WARN lines {warnings:?}, bound {bound} per key"
        );
        let delivered = self.check_nothing_lost().await?;
        println!("{name}: nothing lost: {delivered}");
        Ok(Figures {
            to_unready,
            to_false,
            false_message: condition.message,
            receives_per_message,
            receive_bound,
            warnings,
            warn_secs,
            to_ready,
            to_true,
        })
    }
}

impl Figures {
    fn print(&self, name: &str) {
        let bound = 2 + self.warn_secs / 10;
        println!(
            "{name}: /readyz 503 after {:.1} s, SinksHealthy False after {:.1} s ({}); {:.1} receives per \
             message in {} s (bound {}); WARN lines per sink and kind in {} s {:?} (bound {bound} each); \
             after the fix /readyz 200 in {:.1} s, SinksHealthy True in {:.1} s",
            self.to_unready.as_secs_f64(),
            self.to_false.as_secs_f64(),
            self.false_message,
            self.receives_per_message,
            FAULT.as_secs(),
            self.receive_bound,
            self.warn_secs,
            self.warnings,
            self.to_ready.as_secs_f64(),
            self.to_true.as_secs_f64(),
        );
    }
}

async fn wait_empty(queue: &TestQueue) -> Result<()> {
    let start = Instant::now();
    loop {
        let counts = queue.approximate_counts().await?;
        if counts.total() == 0 {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(90) {
            bail!("{}: not empty once the fault is gone: {counts:?}", queue.name);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The source's `SinksHealthy` condition, once it has `status`.
async fn wait_condition(system: &System, name: &str, status: &str, timeout: Duration) -> Result<Condition> {
    let api: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let start = Instant::now();
    loop {
        let source = api.get(name).await?;
        let found = source.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "SinksHealthy"));
        if let Some(c) = found.filter(|c| c.status == status) {
            return Ok(c);
        }
        if start.elapsed() > timeout {
            bail!(
                "{name}: SinksHealthy is not {status} after {timeout:?}; logs under {}",
                system.state_dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits for the sink health follower's event of `kind` (type, reason). The operator writes the
/// condition first and the event right after it, so a reader of the condition may be a moment early.
async fn wait_event(system: &System, name: &str, kind: (&str, &str)) -> Result<()> {
    let start = Instant::now();
    loop {
        let events = sink_events(system, name).await?;
        if events.iter().any(|(type_, reason)| (type_.as_str(), reason.as_str()) == kind) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("{name}: no {} {} event in 30 s after the condition; events {events:?}", kind.0, kind.1);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Reasons of the source's events from the sink health follower.
async fn sink_events(system: &System, name: &str) -> Result<Vec<(String, String)>> {
    let api: Api<Event> = Api::namespaced(system.client.clone(), &system.namespace);
    let events = api.list(&ListParams::default()).await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.action.as_deref() == Some("SinkHealth"))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect())
}

/// The log of the source's running reader (the runner starts one process per pod).
fn reader_log(system: &System, name: &str) -> Option<PathBuf> {
    let reader = system.running_readers(name).into_iter().next()?;
    Some(system.pod_log(&reader.name))
}

/// The admin address the source's reader printed last (the runner gives each process port 0).
async fn admin_addr(system: &System, name: &str, timeout: Duration) -> Result<String> {
    let start = Instant::now();
    loop {
        let text =
            reader_log(system, name).and_then(|log| std::fs::read_to_string(log).ok()).unwrap_or_default();
        let found =
            text.lines().filter_map(|l| l.split("sluice-reader admin listening on ").nth(1)).next_back();
        if let Some(addr) = found {
            return Ok(addr.trim().to_owned());
        }
        if start.elapsed() > timeout {
            bail!("{name}: no reader printed its admin address; logs under {}", system.state_dir().display());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the reader's `/readyz` says `ready`.
async fn wait_ready(system: &System, name: &str, ready: bool, timeout: Duration) -> Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let start = Instant::now();
    loop {
        let addr = admin_addr(system, name, timeout).await?;
        let answer = http.get(format!("http://{addr}/readyz")).send().await;
        if answer.is_ok_and(|a| a.status().is_success() == ready) {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("{name}: /readyz is not ready={ready} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The sum of a metric family's samples on the source's reader.
async fn reader_metric(system: &System, name: &str, family: &str) -> Result<f64> {
    let addr = admin_addr(system, name, Duration::from_secs(5)).await?;
    let text = reqwest::get(format!("http://{addr}/metrics")).await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| l.strip_prefix(family).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// The reader's rate-limited WARN lines about failing deliveries, counted per sink and kind (the
/// text up to the count: `delivery to sink web rejected`).
fn sink_warnings(system: &System, name: &str) -> BTreeMap<String, usize> {
    let prefix = format!("{}_{name}-reader", system.namespace);
    let logs = system
        .pod_logs()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)));
    let mut counts = BTreeMap::new();
    for text in logs.filter_map(|p| std::fs::read_to_string(p).ok()) {
        for line in text.lines().filter(|l| l.contains("WARN")) {
            let key = if let Some(rest) = line.split("delivery to sink ").nth(1) {
                format!("sink {}", rest.split(" (").next().unwrap_or_default())
            } else if let Some(rest) = line.split("object fetch ").nth(1) {
                format!("object fetch {}", rest.split(" (").next().unwrap_or_default())
            } else if line.contains("no deadLetterSink is configured") {
                "no deadLetterSink".to_owned()
            } else {
                continue;
            };
            *counts.entry(key).or_insert(0) += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_a_missing_dead_letter_queue_and_a_refusing_sink_turn_health_false_then_true()
-> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let faults = [
        Fault::MissingBucket,
        Fault::MissingDeadLetterQueue,
        Fault::RejectingSink,
        Fault::SinkOutage,
        Fault::PayloadOutage,
    ];
    let mut cases = Vec::new();
    for fault in faults {
        cases.push(Case::create(fault, &endpoint).await?);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-sinkhealth");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&sluice_tests::system::bin_dir(), &dir).await?;
    system.start_operator()?;

    let results = futures::future::join_all(cases.iter().map(|case| case.run(&system))).await;
    let mut failures = Vec::new();
    for (case, result) in cases.iter().zip(results) {
        match result {
            Ok(figures) => figures.print(case.fault.source()),
            Err(e) => failures.push(format!("{}: {e:#}", case.fault.source())),
        }
    }
    drop(system);
    for case in cases {
        case.queue.delete().await?;
        case.sink.stop().await?;
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
