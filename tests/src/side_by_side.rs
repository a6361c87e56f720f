//! Two sources side by side on a private cluster, for the suites that take the control plane away
//! (the API server restarted or stopped, etcd stopped): an at-least-once source delivering to an
//! HTTP sink and an exactly-once source committing to S3, three readers each, the operator running.
//!
//! Why both in one cluster: a fault of the control plane hits every source at once, and the two
//! guarantees answer it differently (at-least-once keeps delivering, exactly-once pauses its
//! commits); one cluster through one outage shows both for the price of one start.
//!
//! What it measures is what a reviewer asks of such a fault: delivered and committed counts, lost
//! and duplicated messages (exact, from the sink's record and the S3 objects), receives per message
//! (the readers' own counters), reader restarts, the WARN lines, each reader's `/readyz` and the
//! sources' conditions sampled through the outage.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kube::Api;
use nix::sys::signal::Signal;
use sluice_crds::SqsSource;

use crate::cluster::{Cluster, Options};
use crate::controlplane::{Component, ControlPlane, RESTART_GRACE};
use crate::localstack::{
    LocalStack, Outgoing, QueueOptions, TestQueue, body_for, s3_client, seq_of, sqs_client,
};
use crate::poll::{self, Check};
use crate::scrape;
use crate::sinkserver::SinkServer;
use crate::source::{Sink, SourceYaml};
use crate::system::{System, aws_test_env, bin_dir};

/// The at-least-once source (HTTP sink).
pub const AT_LEAST_ONCE: &str = "alo";
/// The exactly-once source (S3 sink, one object per reader and committed epoch).
pub const EXACTLY_ONCE: &str = "eo";
const REPLICAS: i32 = 3;
/// The queues' visibility timeout: the exactly-once readers' lease is a third of it (10 s).
const VISIBILITY: u32 = 30;
const PREFIX: &str = "out/";

/// The two sources, their queues and sinks, the cluster and the operator.
pub struct SideBySide {
    pub cluster: Cluster,
    pub system: System,
    pub alo_queue: TestQueue,
    pub eo_queue: TestQueue,
    pub sink: SinkServer,
    s3: aws_sdk_s3::Client,
    bucket: String,
    /// Each source's reader pods once all were ready.
    readers: BTreeMap<&'static str, Vec<String>>,
    http: reqwest::Client,
    started: Instant,
    /// Messages sent to each queue so far.
    sent: u64,
    seen_conditions: BTreeSet<String>,
}

/// The part of the control plane an outage takes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    ApiServer,
    Etcd,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::ApiServer => "the API server",
            Part::Etcd => "etcd",
        }
    }

    /// Whose start the API server's readiness is counted from.
    fn whose(self) -> &'static str {
        match self {
            Part::ApiServer => "its",
            Part::Etcd => "etcd's",
        }
    }

    fn of(self, plane: &mut ControlPlane) -> &mut Component {
        match self {
            Part::ApiServer => plane.apiserver(),
            Part::Etcd => plane.etcd(),
        }
    }
}

/// What one look at both sources found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Distinct messages the HTTP sink took from the at-least-once source.
    pub delivered: u64,
    /// Distinct messages in the exactly-once source's committed S3 objects.
    pub committed: u64,
}

/// "1979 delivered, 1770 committed": how the figures read in the suites' output.
impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} delivered, {} committed", self.delivered, self.committed)
    }
}

/// A moment in seconds, or "not yet".
fn moment(at: Option<f64>) -> String {
    at.map_or_else(|| "not yet".to_owned(), |s| format!("after {s:.1} s"))
}

impl SideBySide {
    /// Starts a private cluster in `dir` (tuned by `options`), the operator and both sources, and
    /// waits until all six readers are ready.
    pub async fn start(dir: &Path, options: Options) -> Result<Self> {
        let started = Instant::now();
        let endpoint = LocalStack::ensure().await?;
        let sqs = sqs_client(&endpoint);
        let visibility = QueueOptions { visibility_timeout: Some(VISIBILITY), ..QueueOptions::default() };
        let alo_queue = TestQueue::create_with(&sqs, "faults-alo", false, &visibility).await?;
        let eo_queue = TestQueue::create_with(&sqs, "faults-eo", false, &visibility).await?;
        let s3 = s3_client(&endpoint);
        let bucket = format!("faults-{}", eo_queue.name.to_lowercase().replace('_', "-"));
        s3.create_bucket().bucket(&bucket).send().await.with_context(|| format!("CreateBucket {bucket}"))?;
        let sink = SinkServer::start("127.0.0.1:0").await?;
        let _ = std::fs::remove_dir_all(dir);
        let pod_env = aws_test_env().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let options = Options { bin_dir: Some(bin_dir()), pod_env, ..options };
        let cluster = Cluster::start(&dir.join("cluster"), options).await?;
        let mut system =
            System::start_on(&bin_dir(), &dir.join("system"), cluster.info.clone(), None).await?;
        system.start_operator()?;
        let alo = SourceYaml::new(AT_LEAST_ONCE, &alo_queue.url, &endpoint)
            .at_least_once()
            .visibility_timeout(VISIBILITY)
            .sink("web", Sink::http(&sink.url()))
            .replicas(REPLICAS, REPLICAS)
            .yaml();
        let eo = SourceYaml::new(EXACTLY_ONCE, &eo_queue.url, &endpoint)
            .exactly_once(2)
            .visibility_timeout(VISIBILITY)
            .sink("archive", Sink::s3(&bucket, PREFIX, &endpoint))
            .replicas(REPLICAS, REPLICAS)
            .yaml();
        system.apply_source(&alo).await?;
        system.apply_source(&eo).await?;
        let mut readers = BTreeMap::new();
        for source in [AT_LEAST_ONCE, EXACTLY_ONCE] {
            system.wait_ready_readers(source, REPLICAS, Duration::from_secs(120)).await?;
            readers.insert(source, system.running_readers(source).into_iter().map(|r| r.name).collect());
        }
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let mut me = Self {
            cluster,
            system,
            alo_queue,
            eo_queue,
            sink,
            s3,
            bucket,
            readers,
            http,
            started,
            sent: 0,
            seen_conditions: BTreeSet::new(),
        };
        // What the conditions say at the start is the baseline: only changes are printed later.
        if let Some(lines) = me.conditions().await {
            me.seen_conditions.extend(lines.iter().map(|l| condition_key(l)));
        }
        me.say("cluster, operator and 6 readers ready");
        Ok(me)
    }

    /// Prints `what` with the seconds since the start.
    pub fn say(&self, what: &str) {
        println!("[{:6.1}s] {what}", self.started.elapsed().as_secs_f64());
    }

    /// Sends `n` more numbered messages to each queue (numbered on from the last, four
    /// SendMessageBatch calls in flight per queue: a loaded LocalStack takes a while).
    pub async fn feed(&mut self, n: usize) -> Result<()> {
        let numbered = || (self.sent..self.sent + n as u64).map(|seq| Outgoing::new(body_for(seq)));
        let (a, b) = tokio::join!(
            self.alo_queue.send_messages(numbered(), 4),
            self.eo_queue.send_messages(numbered(), 4)
        );
        a?;
        b?;
        self.sent += n as u64;
        Ok(())
    }

    /// How far both sources got.
    pub async fn progress(&self) -> Result<Progress> {
        Ok(Progress {
            delivered: self.sink.stats().distinct,
            committed: self.committed().await?.len() as u64,
        })
    }

    /// How often each message is in the committed S3 output.
    pub async fn committed(&self) -> Result<BTreeMap<u64, u32>> {
        let mut counts = BTreeMap::new();
        for object in crate::s3_objects::read_all(&self.s3, &self.bucket, PREFIX).await? {
            for line in &object.lines {
                let record: serde_json::Value =
                    serde_json::from_str(line).with_context(|| format!("{}: not a JSON line", object.key))?;
                let seq = seq_of(record["body"].as_str().unwrap_or_default())
                    .with_context(|| format!("{}: a record that is not ours", object.key))?;
                *counts.entry(seq).or_default() += 1;
            }
        }
        Ok(counts)
    }

    /// Waits until both sources flow past `from` (each moved by a message, or has all it was
    /// sent) and every reader's writes are taken by the API again (`/readyz` says nothing of it),
    /// printing when each happened since the call; answers the progress then. Meanwhile it
    /// restarts the operator if it exited ([`Self::restart_operator_if_exited`]) and prints each
    /// condition that changed (what a person reading `kubectl describe` sees change).
    pub async fn wait_flowing(&mut self, from: Progress, within: Duration) -> Result<Progress> {
        let start = Instant::now();
        let (mut delivering, mut committing, mut taken) = (None, None, None);
        loop {
            self.restart_operator_if_exited()?;
            self.print_new_conditions().await;
            let now = self.progress().await?;
            let at = || Some(start.elapsed().as_secs_f64());
            if delivering.is_none() && (now.delivered > from.delivered || now.delivered >= self.sent) {
                delivering = at();
            }
            if committing.is_none() && (now.committed > from.committed || now.committed >= self.sent) {
                committing = at();
            }
            if taken.is_none() && !self.readiness().await.iter().any(|l| l.contains("Kubernetes API")) {
                taken = at();
            }
            if let (Some(d), Some(c), Some(t)) = (delivering, committing, taken) {
                self.say(&format!(
                    "flowing: at-least-once delivering after {d:.1} s, exactly-once committing after {c:.1} s, every reader's writes taken by the API after {t:.1} s ({from} -> {now})"
                ));
                return Ok(now);
            }
            if start.elapsed() > within {
                bail!(
                    "not flowing past {from} in {} s: {now}; delivering {}, committing {}, writes taken {}; logs under {}",
                    within.as_secs(),
                    moment(delivering),
                    moment(committing),
                    moment(taken),
                    self.state_dir().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// A whole outage of `part`: stops it (SIGTERM, killed if it lingers), feeds `batch` more
    /// messages to each source, runs `meanwhile` (what a client sees then), rides the outage out
    /// for `outage` from the stop ([`Self::ride_out`], `/readyz` read `look_at` into it), starts
    /// `part` again and waits until both sources flow ([`Self::wait_flowing`]).
    pub async fn outage(
        &mut self,
        part: Part,
        batch: usize,
        (outage, look_at): (Duration, Duration),
        meanwhile: impl AsyncFnOnce(&Self),
    ) -> Result<()> {
        let what = part.name();
        let stopped = Instant::now();
        part.of(self.cluster.control_plane().context("an outage needs a private cluster")?)
            .stop(Signal::SIGTERM, RESTART_GRACE);
        let at_stop = self.progress().await?;
        self.say(&format!("{what} stopped at {at_stop}"));
        self.feed(batch).await?;
        meanwhile(self).await;
        let away = self.ride_out(what, stopped, at_stop, outage, look_at).await?;

        let back = Instant::now();
        let plane = self.cluster.control_plane().context("an outage needs a private cluster")?;
        part.of(plane).resume()?;
        plane.wait_ready(Duration::from_secs(120)).await?;
        self.say(&format!(
            "API server ready again {:.1} s after {} start",
            back.elapsed().as_secs_f64(),
            part.whose()
        ));
        self.wait_flowing(away, Duration::from_secs(120)).await?;
        Ok(())
    }

    /// Waits out an outage of `what` that began at `stopped` (the sources then at `at_stop`) until
    /// `outage` has passed, reading each reader's `/readyz` `look_at` into it. Prints what was
    /// delivered and committed meanwhile and what `/readyz` said; fails unless the at-least-once
    /// readers delivered and stayed ready and every source's readers said in `/readyz` that the
    /// API does not take their writes. Answers the progress at the end.
    pub async fn ride_out(
        &self,
        what: &str,
        stopped: Instant,
        at_stop: Progress,
        outage: Duration,
        look_at: Duration,
    ) -> Result<Progress> {
        let mut readiness = Vec::new();
        let mut looked = Duration::ZERO;
        loop {
            if readiness.is_empty() && (stopped.elapsed() >= look_at || stopped.elapsed() >= outage) {
                looked = stopped.elapsed();
                readiness = self.readiness().await;
            }
            if stopped.elapsed() >= outage {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1).min(outage.saturating_sub(stopped.elapsed()))).await;
        }
        let away = self.progress().await?;
        self.say(&format!(
            "{what} away {:.1} s: at-least-once delivered {} meanwhile, exactly-once committed {}",
            stopped.elapsed().as_secs_f64(),
            away.delivered - at_stop.delivered,
            away.committed - at_stop.committed
        ));
        println!("each reader's /readyz {:.1} s into the outage:", looked.as_secs_f64());
        for line in &readiness {
            println!("  {line}");
        }
        if away.delivered <= at_stop.delivered && at_stop.delivered < self.sent {
            bail!("the at-least-once readers delivered nothing while {what} was away");
        }
        let alo = format!("{AT_LEAST_ONCE}-");
        if !readiness.iter().filter(|l| l.starts_with(&alo)).all(|l| l.contains(": 200 ready")) {
            bail!("an at-least-once reader must stay ready (it delivers) while {what} is away");
        }
        let said = |source: &str| {
            readiness.iter().any(|l| l.starts_with(&format!("{source}-")) && l.contains("Kubernetes API"))
        };
        if !(said(AT_LEAST_ONCE) && said(EXACTLY_ONCE)) {
            bail!("every source's readers must say in /readyz that the API does not take their writes");
        }
        Ok(away)
    }

    /// The end of a run: waits for every message ([`Self::finish`]), prints the conditions that
    /// changed, the receives per message, the readers' restarts and the WARN lines; fails on a
    /// lost message, an exactly-once duplicate, a restarted reader or an outage the readers (and
    /// the operator, when `operator_must_warn`) did not warn of.
    pub async fn conclude(&mut self, within: Duration, operator_must_warn: bool) -> Result<()> {
        let sent = self.sent;
        let outcome = self.finish(sent, within).await?;
        self.print_new_conditions().await;
        self.receive_counts(sent).await?;
        self.check_no_reader_restarted()?;
        self.check_warnings(operator_must_warn)?;
        if outcome.alo_delivered < sent {
            bail!("at-least-once lost messages: {} of {sent} delivered", outcome.alo_delivered);
        }
        if (outcome.eo_lost, outcome.eo_duplicates) != (0, 0) {
            bail!("exactly-once: {} lost, {} duplicated", outcome.eo_lost, outcome.eo_duplicates);
        }
        Ok(())
    }

    /// Prints the condition lines whose status or reason was not seen before (nothing while the
    /// API is away).
    pub async fn print_new_conditions(&mut self) {
        let Some(lines) = self.conditions().await else { return };
        for line in lines {
            if self.seen_conditions.insert(condition_key(&line)) {
                self.say(&format!("condition: {line}"));
            }
        }
    }

    /// Each reader's `/readyz` answer, `pod: 200 ready` (what a kubelet's probe sees).
    pub async fn readiness(&self) -> Vec<String> {
        let mut out = Vec::new();
        // The readers of the start, by name: the node's pod list is not what is being asked.
        for name in self.readers.values().flatten() {
            let Some(addr) = scrape::admin_addr(&self.system, name) else {
                out.push(format!("{name}: no admin address known"));
                continue;
            };
            let answer = match self.http.get(format!("http://{addr}/readyz")).send().await {
                Ok(r) => format!("{} {}", r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => format!("no answer ({e})"),
            };
            out.push(format!("{name}: {}", answer.trim()));
        }
        out
    }

    /// Both sources' conditions, one line each (`eo CheckpointHealthy=False ReaderFenced: …`);
    /// `None` while the API does not answer.
    pub async fn conditions(&self) -> Option<Vec<String>> {
        let api: Api<SqsSource> = Api::namespaced(self.system.client.clone(), &self.system.namespace);
        let mut out = Vec::new();
        for source in [AT_LEAST_ONCE, EXACTLY_ONCE] {
            let status = api.get(source).await.ok()?.status.unwrap_or_default();
            for c in status.conditions {
                out.push(format!("{source} {}={} {}: {}", c.type_, c.status, c.reason, c.message));
            }
            if !status.fenced_readers.is_empty() {
                out.push(format!("{source} fencedReaders {}", status.fenced_readers.join(", ")));
            }
        }
        Some(out)
    }

    /// Waits until every message sent is delivered (at-least-once) and committed exactly once
    /// (exactly-once) with the queue empty, then looks again after a few checkpoint intervals (a
    /// late commit would show as a duplicate). Answers the at-least-once duplicates and the
    /// exactly-once (lost, duplicated) counts; prints them.
    pub async fn finish(&self, sent: u64, within: Duration) -> Result<Outcome> {
        let counts = poll::until(within, Duration::from_secs(1), || async {
            let counts = self.committed().await?;
            let delivered = self.sink.stats().distinct;
            let empty = self.eo_queue.approximate_counts().await?.total() == 0;
            Ok(if delivered >= sent && counts.len() as u64 >= sent && empty {
                Check::Met(counts)
            } else {
                Check::NotYet(format!(
                    "{delivered} delivered, {} committed of {sent}, exactly-once queue empty: {empty}; logs under {}",
                    counts.len(),
                    self.system.state_dir().display()
                ))
            })
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let again = self.committed().await?;
        let counts = if again == counts { counts } else { again };
        let stats = self.sink.stats();
        let outcome = Outcome {
            alo_delivered: stats.distinct,
            alo_duplicates: stats.duplicates,
            eo_lost: (0..sent).filter(|s| !counts.contains_key(s)).count() as u64,
            eo_duplicates: counts.values().map(|&c| u64::from(c) - 1).sum(),
            eo_distinct: counts.len() as u64,
        };
        self.say(&format!(
            "at-least-once: {} of {sent} delivered, {} lost, {} duplicates; exactly-once: {} of {sent} committed, {} lost, {} duplicates",
            outcome.alo_delivered,
            sent.saturating_sub(outcome.alo_delivered),
            outcome.alo_duplicates,
            outcome.eo_distinct,
            outcome.eo_lost,
            outcome.eo_duplicates
        ));
        Ok(outcome)
    }

    /// Receives per message, from the readers' own counters (`received` over `sent`), per source;
    /// printed. The readers are the ones that ran all along (no restart), so their counters cover
    /// the whole run.
    pub async fn receive_counts(&self, sent: u64) -> Result<()> {
        for source in [AT_LEAST_ONCE, EXACTLY_ONCE] {
            let texts = scrape::readers(&self.system, &self.http, source).await;
            let sum = |name: &str| texts.values().filter_map(|t| scrape::metric(t, name)).sum::<f64>();
            let received = sum("sluice_reader_received_messages_total");
            let redelivered = sum("sluice_reader_redelivered_messages_total");
            self.say(&format!(
                "{source}: {received} receives for {sent} messages ({:.3} per message), {redelivered} redeliveries, from {} readers' /metrics",
                received / sent as f64,
                texts.len()
            ));
        }
        Ok(())
    }

    /// The same reader processes as at the start, none restarted: `(same, restarts)` per source,
    /// printed; fails otherwise.
    pub fn check_no_reader_restarted(&self) -> Result<()> {
        for (source, before) in &self.readers {
            let after = self.system.running_readers(source);
            let same = after.iter().filter(|r| before.contains(&r.name)).count();
            let restarts: u64 = after.iter().map(|r| r.restarts).sum();
            self.say(&format!(
                "{source}: readers {} of {} the same, container restarts {restarts}",
                same,
                before.len()
            ));
            if (same, restarts) != (before.len(), 0) {
                bail!(
                    "{source}: the outage restarted or replaced readers; logs under {}",
                    self.state_dir().display()
                );
            }
        }
        Ok(())
    }

    /// WARN lines of the operator (every run of it) and of the readers, counted and the distinct
    /// messages printed; fails when the readers say nothing, or the operator when
    /// `operator_must_warn`.
    pub fn check_warnings(&self, operator_must_warn: bool) -> Result<()> {
        let mut operator = Vec::new();
        for n in 1..=9 {
            let path = self.system.state_dir().join(format!("operator-{n}.log"));
            let Ok(text) = std::fs::read_to_string(path) else { break };
            operator.extend(text.lines().filter(|l| l.contains(" WARN ")).map(message_of));
        }
        let mut readers = Vec::new();
        for path in self.system.pod_logs() {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            readers.extend(text.lines().filter(|l| l.contains("\"WARN\"")).map(message_of));
        }
        println!(
            "WARN lines: operator {}, readers {}; their distinct messages:",
            operator.len(),
            readers.len()
        );
        let distinct: BTreeSet<&String> = operator.iter().chain(&readers).collect();
        for line in distinct.iter().take(25) {
            println!("  {line}");
        }
        if (operator_must_warn && operator.is_empty()) || readers.is_empty() {
            bail!(
                "the outage must be said in WARN lines (operator {}, readers {})",
                operator.len(),
                readers.len()
            );
        }
        Ok(())
    }

    /// Restarts the operator if it exited during the outage (it gives up its leadership when it
    /// cannot renew its Lease; a pod's kubelet starts it again, here the harness does).
    pub fn restart_operator_if_exited(&mut self) -> Result<()> {
        if let Some(exit) = self.system.operator_exit() {
            self.say(&format!(
                "the operator exited during the outage ({exit}): started again as its pod would be"
            ));
            self.system.start_operator()?;
        }
        Ok(())
    }

    /// Where the logs are.
    pub fn state_dir(&self) -> PathBuf {
        self.system.state_dir().to_owned()
    }

    /// Stops everything and deletes the queues and the bucket's objects.
    pub async fn shutdown(self) -> Result<()> {
        let Self { cluster, system, alo_queue, eo_queue, sink, s3, bucket, .. } = self;
        drop(system);
        cluster.shutdown().await;
        sink.stop().await?;
        alo_queue.delete().await?;
        eo_queue.delete().await?;
        for (key, _) in crate::s3_objects::list(&s3, &bucket, "").await? {
            s3.delete_object().bucket(&bucket).key(key).send().await?;
        }
        s3.delete_bucket().bucket(&bucket).send().await?;
        Ok(())
    }
}

/// The final counts of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub alo_delivered: u64,
    pub alo_duplicates: u64,
    pub eo_distinct: u64,
    pub eo_lost: u64,
    pub eo_duplicates: u64,
}

/// What makes a condition line news: its type, status and reason (a message whose figures moved
/// is not).
fn condition_key(line: &str) -> String {
    line.split(": ").next().unwrap_or(line).to_owned()
}

/// A log line's message: the `"message":"…"` of a JSON line, else the text after ` WARN `.
fn message_of(line: &str) -> String {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
        let fields = &value["fields"];
        if let Some(message) = fields["message"].as_str().or(value["message"].as_str()) {
            return message.to_owned();
        }
    }
    line.split(" WARN ").nth(1).unwrap_or(line).trim().to_owned()
}
