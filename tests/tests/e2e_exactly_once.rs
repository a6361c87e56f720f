//! End-to-end exactly-once (issue 7), as separate processes: LocalStack, the local control plane with
//! its process runner, the operator (whose checkpoint coordinator keeps `<source>-checkpoint`) and
//! three reader processes, each with its lease ConfigMap.
//!
//! 10,000 numbered messages flow from a standard queue to two sinks at once, an S3 bucket (one object
//! per reader and committed epoch) and a FIFO queue (deduplicated by the source MessageId), while the
//! run is disturbed: one reader is SIGKILLed (the runner restarts it under the same pod name, and the
//! new incarnation must wait for the operator to fence the old lease), another is SIGSTOPped for longer
//! than its lease (the operator fences it; resumed, it is a zombie that must find out and rejoin), and
//! the operator itself is SIGKILLed and restarted. Exactly-once means: every message is in the
//! committed S3 output once and in the FIFO target once, none is lost, the source queue is empty.
//!
//! The same run under atLeastOnce must lose nothing; its duplicates are counted and printed.
//!
//! Under exactlyOnce the S3 sink writes gzip-compressed objects partitioned by hour (`keyTemplate:
//! {yyyy}/{MM}/{dd}/{HH}`): every object must also decompress, sit in the hour of its records'
//! SentTimestamp, and hold each record's body byte for byte as sent. One run covers both, so the
//! suite pays for the 10,000 messages once; plain exactly-once objects are covered by e2e_suspend
//! and e2e_sink_outage.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_crds::key_template;
use sluice_protocol::{Checkpoint, checkpoint_configmap_name};
use sluice_tests::localstack::{
    LocalStack, QueueCounts, QueueOptions, TestQueue, body_for, s3_client, seq_of, sqs_client,
};
use sluice_tests::poll::{self, Check};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;
use tokio_util::sync::CancellationToken;

/// Enough that the source is still backlogged at the last fault (the operator restart at 24 s): the
/// readers drain ~100 messages/s on a 2-core box (LocalStack-bound), and the depth at the restart is
/// printed. A larger count only adds draining time after the last fault.
const MESSAGES: u64 = 10_000;
/// Concurrent senders. LocalStack on a small box takes about a minute for 10,000 while readers
/// consume, so the faults below (within the first 30 s) hit a flowing source.
const SENDERS: u64 = 8;
const REPLICAS: i32 = 3;
/// Queue and receive visibility timeout: the readers' lease is a third of it (10 s).
const VISIBILITY: u32 = 30;
/// Longer than the 10 s lease plus the operator's skew allowance: the paused reader gets fenced.
const PAUSE: Duration = Duration::from_secs(15);
/// From the first send until the queue is empty and both sinks hold every message. LocalStack is the
/// bottleneck: on a 2-core box it takes ~100-180 sends/s while readers consume, and it serves the
/// FIFO target's 16 groups at ~150 receive-and-deletes/s; the suite shares it with other e2e tests.
const DRAIN_BOUND: Duration = Duration::from_secs(600);
/// Concurrent receive-and-delete loops on the FIFO target.
const DRAINERS: usize = 6;
/// After everything arrived: long enough for a late (zombie or finishing) commit to show up, so a
/// duplicate that would appear just after the counts matched is still caught.
const SETTLE: Duration = Duration::from_secs(12);
const PREFIX: &str = "out";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Guarantee {
    ExactlyOnce,
    AtLeastOnce,
}

/// How the S3 sink lays out its objects: as they come, or gzip in hourly partitions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    Plain,
    GzipHourly,
}

const HOURLY: &str = "{yyyy}/{MM}/{dd}/{HH}";

fn source_yaml(
    name: &str,
    source: &TestQueue,
    target: &TestQueue,
    bucket: &str,
    endpoint: &str,
    g: Guarantee,
    layout: Layout,
) -> String {
    let yaml = SourceYaml::new(name, &source.url, endpoint).visibility_timeout(VISIBILITY);
    let yaml = match g {
        Guarantee::ExactlyOnce => yaml.exactly_once(2),
        Guarantee::AtLeastOnce => yaml.at_least_once(),
    };
    let archive = match layout {
        Layout::Plain => Sink::s3(bucket, &format!("{PREFIX}/"), endpoint),
        Layout::GzipHourly => {
            Sink::s3(bucket, &format!("{PREFIX}/"), endpoint).compression("gzip").key_template(HOURLY)
        }
    };
    yaml.sink("archive", archive)
        .sink("forward", Sink::sqs(&target.url, endpoint).message_group_id("sluice"))
        .replicas(REPLICAS, REPLICAS)
        .yaml()
}

/// How often each sequence number was seen at one sink.
#[derive(Debug, Default, Clone)]
struct Tally {
    counts: BTreeMap<u64, u32>,
    /// Records whose body is not one of ours (`seq_of` fails, or out of range), or not byte for
    /// byte the body sent.
    foreign: u64,
}

impl Tally {
    fn add(&mut self, body: &str) {
        match seq_of(body) {
            Some(seq) if seq < MESSAGES && body == body_for(seq) => *self.counts.entry(seq).or_default() += 1,
            _ => self.foreign += 1,
        }
    }
    fn distinct(&self) -> u64 {
        self.counts.len() as u64
    }
    fn total(&self) -> u64 {
        self.counts.values().map(|&c| u64::from(c)).sum()
    }
    fn duplicates(&self) -> u64 {
        self.total() - self.distinct()
    }
    fn missing(&self) -> Vec<u64> {
        (0..MESSAGES).filter(|s| !self.counts.contains_key(s)).collect()
    }
    fn duplicated(&self) -> Vec<(u64, u32)> {
        self.counts.iter().filter(|&(_, &c)| c > 1).map(|(&s, &c)| (s, c)).collect()
    }
    fn merge(&mut self, other: &Tally) {
        for (seq, count) in &other.counts {
            *self.counts.entry(*seq).or_default() += count;
        }
        self.foreign += other.foreign;
    }
}

/// The sink's output in the bucket, read incrementally: an object (key, ETag) is read once.
struct S3Output {
    client: aws_sdk_s3::Client,
    bucket: String,
    layout: Layout,
    objects: HashMap<String, (String, Tally)>,
}

impl S3Output {
    async fn scan(&mut self) -> Result<()> {
        let mut listed = Vec::new();
        let mut token = None;
        loop {
            let output = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(format!("{PREFIX}/"))
                .set_continuation_token(token)
                .send()
                .await
                .context("ListObjectsV2")?;
            for object in output.contents() {
                let key = object.key().unwrap_or_default().to_owned();
                let etag = object.e_tag().unwrap_or_default().to_owned();
                listed.push((key, etag));
            }
            token = output.next_continuation_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let fresh: Vec<(String, String)> = listed
            .into_iter()
            .filter(|(key, etag)| self.objects.get(key).is_none_or(|(seen, _)| seen != etag))
            .collect();
        let client = &self.client;
        let bucket = &self.bucket;
        let layout = self.layout;
        let read = futures::stream::iter(fresh)
            .map(|(key, etag)| async move {
                // Decompressed by its Content-Encoding, which must match its name.
                let object = sluice_tests::s3_objects::read(client, bucket, &key, 0).await?;
                let mut tally = Tally::default();
                for line in &object.lines {
                    let record: serde_json::Value = serde_json::from_str(line)
                        .with_context(|| format!("{key}: not a JSON line: {line}"))?;
                    check_partition(layout, &key, &record)?;
                    tally.add(record["body"].as_str().unwrap_or_default());
                }
                anyhow::Ok((key, etag, tally))
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        for result in read {
            let (key, etag, tally) = result?;
            self.objects.insert(key, (etag, tally));
        }
        Ok(())
    }

    /// Deletes every object read and the bucket (LocalStack keeps them in memory until it stops).
    async fn delete_bucket(self) -> Result<()> {
        let keys: Vec<String> = self.objects.into_keys().collect();
        for chunk in keys.chunks(1000) {
            let objects = chunk
                .iter()
                .map(|k| aws_sdk_s3::types::ObjectIdentifier::builder().key(k).build())
                .collect::<Result<Vec<_>, _>>()?;
            let delete = aws_sdk_s3::types::Delete::builder().set_objects(Some(objects)).build()?;
            self.client.delete_objects().bucket(&self.bucket).delete(delete).send().await?;
        }
        self.client.delete_bucket().bucket(&self.bucket).send().await?;
        Ok(())
    }

    fn tally(&self) -> Tally {
        let mut all = Tally::default();
        for (_, tally) in self.objects.values() {
            all.merge(tally);
        }
        all
    }

    /// (objects under `<pod>/epoch-*`, objects under `<pod>/direct/`, others).
    fn kinds(&self) -> (usize, usize, usize) {
        let (mut epoch, mut direct, mut other) = (0, 0, 0);
        for key in self.objects.keys() {
            if key.contains("/epoch-") {
                epoch += 1;
            } else if key.contains("/direct/") {
                direct += 1;
            } else {
                other += 1;
            }
        }
        (epoch, direct, other)
    }
}

/// Under `GzipHourly`, `key` must be in the hour of the record's SentTimestamp (and gzip named).
fn check_partition(layout: Layout, key: &str, record: &serde_json::Value) -> Result<()> {
    if layout == Layout::Plain {
        return Ok(());
    }
    let sent =
        record["sentTimestamp"].as_i64().with_context(|| format!("{key}: a line without sentTimestamp"))?;
    let hour = key_template::render(&key_template::parse(HOURLY).map_err(anyhow::Error::msg)?, sent);
    if !key.starts_with(&format!("{PREFIX}/{hour}/")) || !key.ends_with(".jsonl.gz") {
        bail!("{key}: not in the gzip partition {PREFIX}/{hour}/ of its record sent at {sent}");
    }
    Ok(())
}

/// Receives from the FIFO target and deletes what it received, until stopped; tallies the bodies.
fn drain_target(
    target: TestQueue,
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        loop {
            let messages = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                received = target.receive(Duration::from_secs(1)) => received?,
            };
            if messages.is_empty() {
                continue;
            }
            target.delete_messages(&messages).await?;
            let mut tally = tally.lock().unwrap();
            for message in &messages {
                tally.add(message.body().unwrap_or_default());
            }
        }
    })
}

/// Reads the checkpoint ConfigMap every 250 ms and remembers every fenced member it ever saw (a fenced
/// member is replaced as soon as its pod rejoins, so the final version may show none).
fn watch_fences(
    client: kube::Client,
    source: String,
    fences: Arc<Mutex<BTreeSet<String>>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        let name = checkpoint_configmap_name(&source);
        loop {
            if let Ok(Some(checkpoint)) = read_checkpoint(&api, &name).await {
                let mut fences = fences.lock().unwrap();
                for (pod, member) in &checkpoint.members {
                    if let Some(through) = member.fenced {
                        fences.insert(format!("{pod} {} fenced through {through}", member.incarnation));
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    })
}

async fn read_checkpoint(api: &Api<ConfigMap>, name: &str) -> Result<Option<Checkpoint>> {
    let Some(cm) = api.get_opt(name).await? else { return Ok(None) };
    match cm.data {
        Some(data) if data.contains_key("openEpoch") => Ok(Some(Checkpoint::from_data(&data)?)),
        _ => Ok(None),
    }
}

/// Sends `MESSAGES` numbered messages from `SENDERS` concurrent SendMessageBatch loops.
fn send_all(queue: TestQueue) -> tokio::task::JoinHandle<Result<Duration>> {
    tokio::spawn(async move {
        let start = Instant::now();
        let sends = (0..SENDERS).map(|_| queue.send_batch((MESSAGES / SENDERS) as usize));
        for result in futures::future::join_all(sends).await {
            result?;
        }
        Ok(start.elapsed())
    })
}

/// Waits until every reader is in the flow: under exactlyOnce, `REPLICAS` unfenced members in the
/// checkpoint (each has taken its lease and been admitted); under atLeastOnce, every running reader
/// logged its start. A reader killed before it got that far would test nothing.
async fn wait_joined(system: &System, name: &str, guarantee: Guarantee) -> Result<()> {
    let api: Api<ConfigMap> = Api::default_namespaced(system.client.clone());
    poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let joined = match guarantee {
            Guarantee::ExactlyOnce => {
                read_checkpoint(&api, &checkpoint_configmap_name(name)).await?.is_some_and(|cp| {
                    cp.members.values().filter(|m| m.fenced.is_none()).count() == REPLICAS as usize
                })
            }
            Guarantee::AtLeastOnce => {
                let readers = system.running_readers(name);
                readers.len() == REPLICAS as usize
                    && readers.iter().all(|p| log_count(system, &p.name, "reader started") > 0)
            }
        };
        Ok(Check::met_if(joined, || {
            format!("[{name}] readers did not join within 90s; logs under {}", system.state_dir().display())
        }))
    })
    .await
}

fn log_of(system: &System, pod: &str) -> String {
    std::fs::read_to_string(system.pod_log(pod)).unwrap_or_default()
}

/// Lines of a reader log whose message contains `needle`.
fn log_count(system: &System, pod: &str, needle: &str) -> usize {
    log_of(system, pod).lines().filter(|l| l.contains(needle)).count()
}

struct Outcome {
    s3: Tally,
    fifo: Tally,
    counts: QueueCounts,
    objects: (usize, usize, usize),
}

/// The whole scenario under `guarantee`; answers what both sinks and the queue hold at the end.
async fn run(name: &str, guarantee: Guarantee, layout: Layout) -> Result<Outcome> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(VISIBILITY), ..QueueOptions::default() };
    let source = TestQueue::create_with(&sqs, &format!("{name}-source"), false, &options).await?;
    let target = TestQueue::create(&sqs, &format!("{name}-target"), true).await?;
    let s3 = s3_client(&endpoint);
    let bucket =
        format!("{name}-{}", std::iter::repeat_with(fastrand::lowercase).take(10).collect::<String>());
    s3.create_bucket().bucket(&bucket).send().await.with_context(|| format!("CreateBucket {bucket}"))?;

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut system = System::start_with_operator(&dir).await?;
    system.apply_source(&source_yaml(name, &source, &target, &bucket, &endpoint, guarantee, layout)).await?;
    system.wait_ready_readers(name, REPLICAS, Duration::from_secs(90)).await?;
    wait_joined(&system, name, guarantee).await?;
    let logs = dir.display().to_string();
    println!("[{name}] {REPLICAS} readers ready and joined; logs under {logs}");

    let stop = CancellationToken::new();
    let fifo = Arc::new(Mutex::new(Tally::default()));
    // The sink spreads a standard source's messages over 16 FIFO groups; one drainer per few groups
    // (a FIFO group is locked while any of its messages is in flight).
    let drainers: Vec<_> = (0..DRAINERS)
        .map(|_| drain_target(TestQueue::open(&sqs, &target.url), fifo.clone(), stop.clone()))
        .collect();
    let fences = Arc::new(Mutex::new(BTreeSet::new()));
    let fence_watch = watch_fences(system.client.clone(), name.to_owned(), fences.clone(), stop.clone());

    let start = Instant::now();
    let at = |s: Instant| s.elapsed().as_secs_f64();
    let mut sender = Some(send_all(TestQueue::open(&sqs, &source.url)));

    // Faults, on a schedule from the first send.
    let sleep_until = |offset: Duration| tokio::time::sleep_until((start + offset).into());
    sleep_until(Duration::from_secs(3)).await;
    let readers = system.running_readers(name);
    if readers.len() < 2 {
        bail!("[{name}] only {} readers running at the first fault; logs under {logs}", readers.len());
    }
    let (killed, paused) = (readers[0].clone(), readers[1].clone());
    let killed_pid = killed.pid.context("a running reader has a pid")?;
    kill(Pid::from_raw(killed_pid as i32), Signal::SIGKILL)?;
    println!("[{:6.1}s] SIGKILLed {} (pid {killed_pid})", at(start), killed.name);

    sleep_until(Duration::from_secs(5)).await;
    let paused_pid = Pid::from_raw(paused.pid.context("a running reader has a pid")? as i32);
    kill(paused_pid, Signal::SIGSTOP)?;
    println!("[{:6.1}s] SIGSTOPped {} (pid {paused_pid}) for {PAUSE:?}", at(start), paused.name);
    sleep_until(Duration::from_secs(5) + PAUSE).await;
    kill(paused_pid, Signal::SIGCONT)?;
    println!("[{:6.1}s] SIGCONTed {}: it resumes as a zombie", at(start), paused.name);

    sleep_until(Duration::from_secs(24)).await;
    system.stop_operator(Signal::SIGKILL)?;
    system.start_operator()?;
    let backlog = source.approximate_counts().await?;
    println!("[{:6.1}s] operator SIGKILLed and restarted; source then {backlog:?}", at(start));

    // Wait: the queue empty, the committed S3 output and the FIFO target complete.
    let mut output = S3Output { client: s3.clone(), bucket: bucket.clone(), layout, objects: HashMap::new() };
    let mut last_print = Instant::now();
    let checkpoint_api: Api<ConfigMap> = Api::default_namespaced(system.client.clone());
    let drained = loop {
        if sender.as_ref().is_some_and(tokio::task::JoinHandle::is_finished) {
            let sent = sender.take().context("the sender")?.await??;
            println!(
                "[{:6.1}s] sent {MESSAGES} messages ({SENDERS} senders; sending took {:.1}s)",
                at(start),
                sent.as_secs_f64()
            );
        }
        output.scan().await?;
        let counts = source.approximate_counts().await?;
        let s3_tally = output.tally();
        let fifo_distinct = fifo.lock().unwrap().distinct();
        if sender.is_none()
            && counts.total() == 0
            && s3_tally.distinct() == MESSAGES
            && fifo_distinct == MESSAGES
        {
            break start.elapsed();
        }
        if last_print.elapsed() > Duration::from_secs(15) {
            last_print = Instant::now();
            let target_counts = target.approximate_counts().await?;
            println!(
                "[{:6.1}s] source {counts:?}; s3 {} distinct of {} records; fifo {fifo_distinct} drained, \
                 target {target_counts:?}; committed epoch {:?}",
                at(start),
                s3_tally.distinct(),
                s3_tally.total(),
                read_checkpoint(&checkpoint_api, &checkpoint_configmap_name(name))
                    .await?
                    .map(|cp| cp.committed),
            );
        }
        if start.elapsed() > DRAIN_BOUND {
            let missing = s3_tally.missing();
            bail!(
                "[{name}] not drained within {DRAIN_BOUND:?}: queue {counts:?}, s3 {} distinct ({} missing, first {:?}), \
                 fifo {fifo_distinct} distinct, fences seen {:?}; logs under {logs}",
                s3_tally.distinct(),
                missing.len(),
                &missing[..missing.len().min(10)],
                fences.lock().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!("[{:6.1}s] drained: queue empty, both sinks hold all {MESSAGES}", drained.as_secs_f64());

    // Settle, then look once more: a late commit would add duplicates now.
    tokio::time::sleep(SETTLE).await;
    output.scan().await?;
    stop.cancel();
    for drainer in drainers {
        drainer.await??;
    }
    fence_watch.await?;
    let rest = TestQueue::open(&sqs, &target.url).drain_bodies().await?;
    for body in &rest {
        fifo.lock().unwrap().add(body);
    }
    let counts = source.approximate_counts().await?;

    // Figures.
    println!(
        "[{name}] time to drain (first send to queue empty and both sinks complete): {:.1}s",
        drained.as_secs_f64()
    );
    if guarantee == Guarantee::ExactlyOnce {
        let api: Api<ConfigMap> = Api::default_namespaced(system.client.clone());
        match read_checkpoint(&api, &checkpoint_configmap_name(name)).await? {
            Some(cp) => {
                println!("[{name}] checkpoint: committedEpoch {}, openEpoch {}", cp.committed, cp.open);
                for (pod, m) in &cp.members {
                    let fence = m.fenced.map_or_else(String::new, |t| format!(", fenced through {t}"));
                    println!(
                        "[{name}]   member {pod} incarnation {} admitted at {}{fence}",
                        m.incarnation, m.admitted
                    );
                }
            }
            None => println!("[{name}] checkpoint: none written"),
        }
        let fences = fences.lock().unwrap();
        println!("[{name}] fenced members seen during the run: {}", fences.len());
        for fence in fences.iter() {
            println!("[{name}]   {fence}");
        }
    }
    for p in system.reader_processes().iter().filter(|p| p.deployment == format!("{name}-reader")) {
        println!(
            "[{name}] pod {}: restarts {}, last exit {:?}, 'rejoined' x{}, 'lease taken' x{}",
            p.name,
            p.restarts,
            p.last_exit,
            log_count(&system, &p.name, "rejoined with a new incarnation"),
            log_count(&system, &p.name, "lease taken"),
        );
    }
    println!(
        "[{name}] killed pod {}; paused pod {}: 'epoch aborted' x{}",
        killed.name,
        paused.name,
        log_count(&system, &paused.name, "epoch aborted"),
    );
    // The faults happened as intended (else the run proves less than it claims): the killed reader was
    // restarted, and under exactlyOnce its new incarnation took the lease over only after the fence
    // (a second "lease taken"); the paused one found itself fenced and rejoined.
    let restarts = system.reader_processes().iter().find(|p| p.name == killed.name).map_or(0, |p| p.restarts);
    assert!(restarts >= 1, "[{name}] the killed reader {} was not restarted; logs under {logs}", killed.name);
    if guarantee == Guarantee::ExactlyOnce {
        assert!(
            log_count(&system, &killed.name, "lease taken") >= 2,
            "[{name}] the restarted reader {} never took its lease over; logs under {logs}",
            killed.name
        );
        assert!(
            log_count(&system, &paused.name, "rejoined with a new incarnation") >= 1,
            "[{name}] the paused reader {} never noticed its fence and rejoined; logs under {logs}",
            paused.name
        );
    }
    let fifo = fifo.lock().unwrap().clone();
    let s3_tally = output.tally();
    let objects = output.kinds();
    drop(system);
    output.delete_bucket().await.with_context(|| format!("deleting bucket {bucket}"))?;
    source.delete().await?;
    target.delete().await?;
    Ok(Outcome { s3: s3_tally, fifo, counts, objects })
}

fn describe(what: &str, tally: &Tally) -> String {
    let missing = tally.missing();
    let duplicated = tally.duplicated();
    format!(
        "{what}: {} records, {} distinct, {} duplicates, {} missing (first {:?}), duplicated (first {:?}), {} foreign",
        tally.total(),
        tally.distinct(),
        tally.duplicates(),
        missing.len(),
        &missing[..missing.len().min(10)],
        &duplicated[..duplicated.len().min(10)],
        tally.foreign
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_to_s3_and_fifo_survives_kills_pauses_and_an_operator_restart() -> Result<()> {
    exactly_once_holds("eo-exact", Layout::GzipHourly).await
}

/// The exactly-once run with `layout`: nothing lost, nothing twice, nothing altered.
async fn exactly_once_holds(name: &str, layout: Layout) -> Result<()> {
    let out = run(name, Guarantee::ExactlyOnce, layout).await?;
    let (s3, fifo) = (describe("s3", &out.s3), describe("fifo", &out.fifo));
    println!("{s3}\n{fifo}");
    println!(
        "s3 objects: {} epoch, {} direct, {} other; source queue {:?}",
        out.objects.0, out.objects.1, out.objects.2, out.counts
    );
    assert_eq!(out.s3.foreign, 0, "{s3}");
    assert!(out.s3.missing().is_empty(), "lost in S3: {s3}");
    assert_eq!(out.s3.duplicates(), 0, "duplicates in the committed S3 output: {s3}");
    assert_eq!(out.objects.1 + out.objects.2, 0, "exactlyOnce wrote objects outside epochs");
    assert_eq!(out.fifo.foreign, 0, "{fifo}");
    assert!(out.fifo.missing().is_empty(), "lost in the FIFO target: {fifo}");
    assert_eq!(out.fifo.duplicates(), 0, "duplicates in the FIFO target: {fifo}");
    assert_eq!(out.counts.total(), 0, "source queue not empty: {:?}", out.counts);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_same_run_counts_duplicates() -> Result<()> {
    let out = run("eo-atleast", Guarantee::AtLeastOnce, Layout::Plain).await?;
    let (s3, fifo) = (describe("s3", &out.s3), describe("fifo", &out.fifo));
    println!("{s3}\n{fifo}");
    println!(
        "s3 objects: {} epoch, {} direct, {} other; source queue {:?}",
        out.objects.0, out.objects.1, out.objects.2, out.counts
    );
    println!(
        "duplicates (counted, not failed on): s3 {}, fifo target {} (SQS drops a FIFO duplicate sent within 5 minutes)",
        out.s3.duplicates(),
        out.fifo.duplicates()
    );
    assert_eq!(out.s3.foreign, 0, "{s3}");
    assert!(out.s3.missing().is_empty(), "lost in S3: {s3}");
    assert_eq!(out.fifo.foreign, 0, "{fifo}");
    assert!(out.fifo.missing().is_empty(), "lost in the FIFO target: {fifo}");
    assert_eq!(out.counts.total(), 0, "source queue not empty: {:?}", out.counts);
    Ok(())
}
