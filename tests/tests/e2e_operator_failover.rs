//! Operator failover on the real API server: two operator replicas compete for the
//! `coordination.k8s.io` Lease; the leader is SIGKILLed (a) right after the autoscaler's first
//! raise of a burst and (b) while an exactly-once epoch is open. The standby must take over within
//! about the Lease duration (15 s; its first try comes at most one 2 s retry later), the reader
//! Deployment's `spec.replicas` must never go back down during the burst (every change is
//! printed), and under exactly-once the committed epoch must only move forward while the S3
//! output holds every message exactly once (read back from the objects, not from logs).
//!
//! Each test runs about a minute on a quiet machine (the Lease wait is 13-17 s of it), and the
//! two run side by side under nextest.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use nix::sys::signal::Signal;
use sluice_protocol::{Checkpoint, checkpoint_configmap_name};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, s3_client, seq_of, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, bin_dir};
use tokio_util::sync::CancellationToken;

/// The operator's Lease (its `--lease-name` default) and duration (`LeaseTimings::default`).
const LEASE: &str = "sluice-operator";
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// The Lease's holder, read every 100 ms until `want` holds it (or 60 s pass).
async fn wait_holder(system: &System, want: impl Fn(&str) -> bool) -> Result<(String, Option<Timestamp>)> {
    let api: Api<Lease> = Api::default_namespaced(system.client.clone());
    poll::until(Duration::from_secs(60), Duration::from_millis(100), || async {
        let spec = api.get_opt(LEASE).await?.and_then(|l| l.spec);
        let holder = spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
        let acquired = spec.and_then(|s| s.acquire_time).map(|t| t.0);
        Ok(if want(&holder) {
            Check::Met((holder, acquired))
        } else {
            Check::NotYet(format!("lease holder is {holder:?}; logs under {}", system.state_dir().display()))
        })
    })
    .await
}

/// Seconds from `earlier` to `later` (wall clocks of this machine, where the API server runs too).
fn seconds(earlier: Timestamp, later: Timestamp) -> f64 {
    later.duration_since(earlier).as_secs_f64()
}

/// The suite's system in an emptied `dir` with two operator replicas; answers it with (leader,
/// standby) once one leads.
async fn two_operators(dir: &Path) -> Result<(System, String, String)> {
    let _ = std::fs::remove_dir_all(dir);
    let mut system = System::start(&bin_dir(), dir).await?;
    system.start_operator()?;
    let (leader, _) = wait_holder(&system, |h| !h.is_empty()).await?;
    let standby = system.start_operator_replica()?;
    println!("operator replicas: {leader} leads, {standby} stands by");
    Ok((system, leader, standby))
}

/// SIGKILLs `leader` and waits until `standby` holds the Lease; prints both moments and the time
/// between the kill and the Lease's new acquireTime. Answers the kill's time since `start`.
async fn failover(
    system: &mut System,
    leader: &str,
    standby: &str,
    start: Instant,
    when: &str,
) -> Result<f64> {
    let killed_at = Timestamp::now();
    system.stop_operator_replica(leader, Signal::SIGKILL)?;
    let killed = start.elapsed().as_secs_f64();
    println!("[{killed:5.1}s] SIGKILLed the leader {leader} {when}");
    let (holder, acquired) = wait_holder(system, |h| h == standby).await?;
    let took = acquired.map_or(f64::NAN, |t| seconds(killed_at, t));
    println!(
        "takeover: {holder} acquired the Lease {took:.1} s after the kill (lease duration {} s)",
        LEASE_DURATION.as_secs()
    );
    Ok(killed)
}

/// The burst's reader maximum: 2,000 messages at 200 a reader ask for more, and the scaler adds
/// one reader a decision (`scaleUpMaxStep` 1), so a leader killed after the first step leaves the
/// next ones to its successor.
const MAX_READERS: i32 = 4;

/// Every distinct value of something polled every 100 ms, with its time since `start`.
type History<T> = Arc<Mutex<Vec<(f64, T)>>>;

fn record<T, F, Fut>(start: Instant, stop: CancellationToken, read: F) -> History<T>
where
    T: PartialEq + Clone + Send + 'static,
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Option<T>> + Send,
{
    let history: History<T> = Arc::default();
    let out = history.clone();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Some(value) = read().await {
                let mut h = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if h.last().is_none_or(|(_, last)| *last != value) {
                    h.push((start.elapsed().as_secs_f64(), value));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    history
}

fn snapshot<T: Clone>(history: &History<T>) -> Vec<(f64, T)> {
    history.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_mid_scale_up_without_flapping_the_readers() -> Result<()> {
    let wall = Instant::now();
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(10), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "e2e-failover-scale", false, &options).await?;
    // Each delivery takes 200 ms, two at a time: 10 messages a second a reader, so that the burst
    // of 2,000 still asks for every reader allowed when the standby takes over, 15-20 s after the
    // kill, however slowly the machine sent it.
    let sink = SinkServer::start_with_latency("127.0.0.1:0", Duration::from_millis(200)).await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-failover-scale");
    let (mut system, leader, standby) = two_operators(&dir).await?;

    let yaml = SourceYaml::new("burst", &queue.url, &endpoint)
        .at_least_once()
        .visibility_timeout(10)
        .sink("webhook", Sink::http(&sink.url()).timeout_ms(5_000).concurrency(2))
        .replicas(1, MAX_READERS)
        .target_per_replica(200)
        .scale_up_max_step(1)
        .scale_down_stabilization(600)
        .yaml();
    system.apply_source(&yaml).await?;
    system.wait_ready_readers("burst", 1, Duration::from_secs(60)).await?;

    let start = Instant::now();
    let stop = CancellationToken::new();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::default_namespaced(system.client.clone());
    let replicas = record(start, stop.clone(), move || {
        let api = deployments.clone();
        async move { api.get_opt("burst-reader").await.ok().flatten().and_then(|d| d.spec?.replicas) }
    });
    const MESSAGES: u64 = 2_000;
    // Sent while the test watches: the first raise comes long before LocalStack took all of it.
    let sender = {
        let queue = TestQueue::open(&sqs, &queue.url);
        tokio::spawn(async move { queue.send_batch(MESSAGES as usize).await })
    };
    poll::until(Duration::from_secs(60), Duration::from_millis(50), || async {
        let raised = snapshot(&replicas).iter().any(|(_, r)| *r > 1);
        Ok(Check::met_if(raised, || "the autoscaler did not raise the readers within 60 s".to_owned()))
    })
    .await?;
    let killed = failover(&mut system, &leader, &standby, start, "right after the first raise").await?;
    // The new leader's scaler carries on: the burst still needs more readers than the first raise.
    let before = snapshot(&replicas).last().map_or(0, |(_, r)| *r);
    let acted = poll::until(Duration::from_secs(60), Duration::from_millis(100), || async {
        let changes = snapshot(&replicas);
        let after_kill = changes.iter().find(|(at, r)| *at > killed && *r != before).cloned();
        Ok(match after_kill {
            Some(change) => Check::Met(change),
            None => Check::NotYet(format!("no replica change by the new leader (still {before})")),
        })
    })
    .await;
    match &acted {
        Ok((at, r)) => println!(
            "new leader's first scale: spec.replicas {before} -> {r}, {:.1} s after the kill",
            at - killed
        ),
        Err(e) => println!("new leader's first scale: none ({e})"),
    }
    sender.await??;
    let stats = sink.wait_for_distinct(MESSAGES, Duration::from_secs(120)).await?;
    stop.cancel();
    let changes = snapshot(&replicas);
    for (at, r) in &changes {
        println!("  [{at:5.1}s] spec.replicas = {r}");
    }
    println!(
        "delivered {} distinct of {MESSAGES}, {} duplicates; test wall {:.1} s",
        stats.distinct,
        stats.duplicates,
        wall.elapsed().as_secs_f64()
    );
    let decreases: Vec<_> = changes.windows(2).filter(|w| w[1].1 < w[0].1).collect();
    assert!(decreases.is_empty(), "spec.replicas went down during the burst: {changes:?}");
    // The first raise usually stops short of the maximum; if it reached it, there is nothing left
    // for the new leader to raise.
    if before < MAX_READERS {
        assert!(acted.is_ok(), "the new leader never scaled: {changes:?}");
    }
    assert_eq!(stats.distinct, MESSAGES, "lost messages");
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_mid_epoch_and_no_epoch_is_committed_twice() -> Result<()> {
    let wall = Instant::now();
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "e2e-failover-epoch", false, &options).await?;
    let s3 = s3_client(&endpoint);
    let bucket =
        format!("failover-{}", std::iter::repeat_with(fastrand::lowercase).take(10).collect::<String>());
    s3.create_bucket().bucket(&bucket).send().await.with_context(|| format!("CreateBucket {bucket}"))?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-failover-epoch");
    let (mut system, leader, standby) = two_operators(&dir).await?;

    let yaml = SourceYaml::new("epochs", &queue.url, &endpoint)
        .exactly_once(2)
        .visibility_timeout(30)
        .sink("archive", Sink::s3(&bucket, "out/", &endpoint))
        .replicas(2, 2)
        .yaml();
    system.apply_source(&yaml).await?;
    system.wait_ready_readers("epochs", 2, Duration::from_secs(60)).await?;

    let start = Instant::now();
    let stop = CancellationToken::new();
    let configmaps: Api<ConfigMap> = Api::default_namespaced(system.client.clone());
    let name = checkpoint_configmap_name("epochs");
    let epochs = record(start, stop.clone(), move || {
        let (api, name) = (configmaps.clone(), name.clone());
        async move {
            let data = api.get_opt(&name).await.ok().flatten()?.data?;
            let cp = Checkpoint::from_data(&data).ok()?;
            Some((cp.open, cp.committed))
        }
    });
    const MESSAGES: u64 = 1_500;
    // Sent while the test watches the epochs, so the kill does not wait for LocalStack.
    let sender = {
        let queue = TestQueue::open(&sqs, &queue.url);
        tokio::spawn(async move { queue.send_batch(MESSAGES as usize).await })
    };
    // Mid-epoch: right after the leader opened a new epoch while records of the last are in flight
    // (5 s into the send, a few hundred messages are flowing).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let first = snapshot(&epochs).last().map(|(_, e)| *e);
    poll::until(Duration::from_secs(60), Duration::from_millis(50), || async {
        let now = snapshot(&epochs).last().map(|(_, e)| *e);
        let opened = now.is_some_and(|(open, committed)| open >= 3 && Some((open, committed)) != first);
        Ok(Check::met_if(opened, || format!("no new epoch opened (checkpoint {now:?})")))
    })
    .await?;
    let (open, committed) = snapshot(&epochs).last().map_or((0, 0), |(_, e)| *e);
    let when = format!("with epoch {open} open and {committed} committed");
    let killed = failover(&mut system, &leader, &standby, start, &when).await?;

    sender.await??;
    // Everything in the committed S3 output, the queue empty.
    let tally = poll::until(Duration::from_secs(120), Duration::from_millis(1000), || async {
        let objects = sluice_tests::s3_objects::read_all(&s3, &bucket, "out/").await?;
        let mut counts: BTreeMap<u64, u32> = BTreeMap::new();
        for line in objects.iter().flat_map(|o| &o.lines) {
            let record: serde_json::Value = serde_json::from_str(line)?;
            let seq = seq_of(record["body"].as_str().unwrap_or_default()).context("a record of ours")?;
            *counts.entry(seq).or_default() += 1;
        }
        let depth = queue.approximate_counts().await?.total();
        Ok(if counts.len() as u64 == MESSAGES && depth == 0 {
            Check::Met((objects.into_iter().map(|o| o.key).collect::<Vec<_>>(), counts))
        } else {
            Check::NotYet(format!("S3 holds {} of {MESSAGES} distinct, queue depth {depth}", counts.len()))
        })
    })
    .await?;
    // The data can be complete before the new leader's first write (a fast machine commits the last
    // epoch before the kill): its first checkpoint write is waited for on its own, within its lease.
    let first_write = poll::until(Duration::from_secs(60), Duration::from_millis(200), || async {
        let written = snapshot(&epochs).iter().any(|(at, _)| *at > killed);
        Ok(Check::met_if(written, || "no checkpoint write since the kill".to_owned()))
    })
    .await;
    if let Err(error) = &first_write {
        println!("new leader's first checkpoint write: none ({error})");
    }
    stop.cancel();
    let history = snapshot(&epochs);
    let after_kill = history.iter().find(|(at, _)| *at > killed);
    if let Some((at, e)) = after_kill {
        println!(
            "new leader's first checkpoint write: epoch {} open, {} committed, {:.1} s after the kill",
            e.0,
            e.1,
            at - killed
        );
    }
    let mut committed: Vec<u64> = history.iter().map(|(_, (_, c))| *c).collect();
    committed.dedup();
    println!("committed epochs seen, in order: {committed:?}");
    let (keys, counts) = tally;
    // The sink's objects are `out/<reader>/epoch-<E>/<incarnation>[-<n>].jsonl`: one incarnation
    // per reader and epoch, or the epoch was committed twice.
    let mut writers: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    for key in &keys {
        let parts: Vec<&str> = key.split('/').collect();
        let [_, reader, epoch, file] = parts[..] else { bail!("unexpected object key {key}") };
        let incarnation = file.split(['-', '.']).next().unwrap_or_default().to_owned();
        writers.entry((reader.to_owned(), epoch.to_owned())).or_default().insert(incarnation);
    }
    let twice: Vec<_> = writers.iter().filter(|(_, w)| w.len() > 1).collect();
    let objects = keys.len();
    println!(
        "S3: {objects} objects for {} (reader, epoch) pairs; pairs written by more than one incarnation: {}",
        writers.len(),
        twice.len()
    );
    let duplicates: u64 = counts.values().map(|&c| u64::from(c) - 1).sum();
    println!(
        "S3: {objects} objects, {} distinct of {MESSAGES}, {duplicates} duplicates; test wall {:.1} s",
        counts.len(),
        wall.elapsed().as_secs_f64()
    );
    if committed.windows(2).any(|w| w[1] < w[0]) {
        bail!("the committed epoch went backwards: {history:?}");
    }
    assert!(after_kill.is_some(), "the new leader never wrote the checkpoint");
    assert!(twice.is_empty(), "epochs committed by two incarnations: {twice:?}");
    assert_eq!(duplicates, 0, "records committed twice");
    assert_eq!(counts.len() as u64, MESSAGES, "lost messages");
    drop(system);
    queue.delete().await?;
    for key in &keys {
        s3.delete_object().bucket(&bucket).key(key).send().await?;
    }
    s3.delete_bucket().bucket(&bucket).send().await?;
    Ok(())
}
