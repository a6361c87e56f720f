//! End-to-end autoscaling, as separate processes: LocalStack, the local control plane with its process
//! runner, the operator (whose autoscaler polls the queue) and the reader processes it asks for.
//!
//! A source with `minReplicas: 0` starts with no reader at all; a burst of 20,000 messages must raise
//! the reader Deployment to `maxReplicas`, every message must reach the sink (distinct CloudEvents ids)
//! with the queue left empty, and once idle the fleet must return to zero with every removed reader
//! draining cleanly: no SIGKILL at the end of a grace period, no in-flight message left behind, no
//! crash, no request refused at the sink.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use sluice_tests::kubelet::SIGKILL_NOTE as KUBELET_SIGKILL;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{ReaderProcess, System};

const SOURCE: &str = "burst";
const MESSAGES: usize = 20_000;
const SENDERS: usize = 8;
const MAX_REPLICAS: i32 = 4;
/// The whole scenario after the burst starts: up, drain, back to zero.
const BOUND: Duration = Duration::from_secs(8 * 60);

fn source_yaml(queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .visibility_timeout(10)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(0, MAX_REPLICAS)
        .target_per_replica(100)
        .scale_down_stabilization(5)
        .idle_cooldown(5)
        .yaml()
}

/// Offsets from the start of the burst.
#[derive(Debug, Default)]
struct Timeline {
    sent: Option<Duration>,
    first_scale_up: Option<Duration>,
    at_max: Option<Duration>,
    max_processes: Option<Duration>,
    drained: Option<Duration>,
    zero: Option<Duration>,
    peak_replicas: i32,
    peak_processes: usize,
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()))
}

/// Sends the burst from `SENDERS` concurrent SendMessageBatch loops.
async fn send_burst(queue: &TestQueue) -> Result<()> {
    let per = MESSAGES / SENDERS;
    let sends = (0..SENDERS).map(|_| queue.send_batch(per));
    for result in futures::future::join_all(sends).await {
        result?;
    }
    Ok(())
}

/// Samples the Deployment, the reader processes, the sink and the queue until the fleet is back to
/// zero after delivering everything, or `BOUND` passes.
async fn watch(
    system: &System,
    sink: &SinkServer,
    queue: &TestQueue,
    start: Instant,
    seen: &mut BTreeMap<String, ReaderProcess>,
    timeline: &mut Timeline,
) -> Result<()> {
    let mut last_queue_check: Option<Instant> = None;
    let mut queue_empty = false;
    loop {
        let now = start.elapsed();
        let replicas = system.reader_replicas(SOURCE).await?.unwrap_or(-1);
        let running = system.running_readers(SOURCE);
        for p in system.reader_processes().into_iter().filter(|p| p.deployment == format!("{SOURCE}-reader"))
        {
            seen.insert(p.name.clone(), p);
        }
        timeline.peak_replicas = timeline.peak_replicas.max(replicas);
        timeline.peak_processes = timeline.peak_processes.max(running.len());
        if replicas > 0 && timeline.first_scale_up.is_none() {
            timeline.first_scale_up = Some(now);
            println!("[{:6.1}s] first scale-up: spec.replicas = {replicas}", now.as_secs_f64());
        }
        if replicas >= MAX_REPLICAS && timeline.at_max.is_none() {
            timeline.at_max = Some(now);
            println!("[{:6.1}s] spec.replicas at max ({replicas})", now.as_secs_f64());
        }
        if running.len() >= MAX_REPLICAS as usize && timeline.max_processes.is_none() {
            timeline.max_processes = Some(now);
            println!("[{:6.1}s] {} reader processes running", now.as_secs_f64(), running.len());
        }
        // Terminating readers still draining count: zero means every process has exited.
        let processes = system.alive_readers(SOURCE).len();
        let stats = sink.stats();
        if timeline.drained.is_none() && stats.distinct >= MESSAGES as u64 {
            if last_queue_check.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                last_queue_check = Some(Instant::now());
                queue_empty = queue.approximate_counts().await?.total() == 0;
            }
            if queue_empty {
                timeline.drained = Some(now);
                println!(
                    "[{:6.1}s] drained: {} distinct at the sink, {} duplicates, queue empty",
                    now.as_secs_f64(),
                    stats.distinct,
                    stats.duplicates
                );
            }
        }
        if timeline.drained.is_some() && replicas == 0 && processes == 0 {
            timeline.zero = Some(now);
            println!(
                "[{:6.1}s] back to zero: spec.replicas = 0, every reader process exited",
                now.as_secs_f64()
            );
            return Ok(());
        }
        if now > BOUND {
            bail!(
                "not back to zero within {BOUND:?}: {timeline:?}; spec.replicas = {replicas}, {} running, \
                 sink {stats:?}; logs under {}",
                running.len(),
                system.state_dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every reader that was stopped drained: a reader stopped once its receive loop ran says `drained`
/// with nothing left in flight (one stopped while still starting has nothing to drain), nothing reached
/// a drain deadline, and the runner never had to SIGKILL at the end of a grace period. Returns (readers
/// stopped, readers that drained work).
fn check_drains(system: &System) -> Result<(usize, usize)> {
    let (mut stopped, mut drained) = (0, 0);
    let mut killed = Vec::new();
    for path in system.pod_logs() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if !name.starts_with(&format!("{}_{SOURCE}-reader-", system.namespace)) {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        killed.extend(text.lines().filter(|l| l.contains(KUBELET_SIGKILL)).map(|l| format!("{name}: {l}")));
        let (mut sigterm, mut draining, mut left) = (false, false, None);
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            // Both binaries write flat JSON lines: the message and the fields at the top level.
            let fields = &value;
            let message = fields["message"].as_str().unwrap_or_default();
            if message.contains("drain deadline reached") {
                bail!("{name}: a drain was cut off: {line}");
            }
            sigterm |= message == "SIGTERM: draining";
            draining |= message.starts_with("stopping: draining");
            if message == "drained" {
                left = fields["left"].as_u64();
            }
        }
        assert!(sigterm, "{name} was never asked to stop, yet the fleet is at zero");
        stopped += 1;
        if draining {
            assert_eq!(left, Some(0), "{name} did not report a complete drain (left = {left:?})");
            drained += 1;
        }
    }
    assert!(killed.is_empty(), "readers were SIGKILLed at the end of their grace period: {killed:?}");
    Ok((stopped, drained))
}

/// The field managers holding the reader Deployment's `spec.replicas`.
async fn replicas_owners(system: &System) -> Result<Vec<String>> {
    let api: kube::Api<Deployment> = kube::Api::namespaced(system.client.clone(), &system.namespace);
    let deployment = api.get(&format!("{SOURCE}-reader")).await?;
    let entries = deployment.metadata.managed_fields.unwrap_or_default();
    Ok(entries
        .into_iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").and_then(|s| s.get("f:replicas")).is_some())
        })
        .filter_map(|e| e.manager)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_20000_scales_zero_to_max_and_back_to_zero_without_loss() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(10), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-autoscale", false, &options).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-autoscale")).await?;
    system.apply_source(&source_yaml(&queue, &endpoint, &sink.url())).await?;

    // Idle at zero: the Deployment exists with spec.replicas 0 and no reader process runs.
    system.wait_idle_at_zero(SOURCE, Duration::from_secs(60)).await?;
    for _ in 0..12 {
        assert_eq!(system.reader_replicas(SOURCE).await?, Some(0), "replicas rose with an empty queue");
        assert!(system.running_readers(SOURCE).is_empty(), "a reader runs with minReplicas 0 and no work");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("idle: spec.replicas = 0, no reader process");
    // Created at zero: no reader pod ever ran (a Deployment created without replicas starts one
    // for the autoscaler to stop), and the autoscaler's field manager owns the field from the start.
    let prefix = format!("{}_{SOURCE}-reader-", system.namespace);
    let started: Vec<_> = system
        .pod_logs()
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    assert!(started.is_empty(), "reader pods ran before any message: {started:?}");
    let owners = replicas_owners(&system).await?;
    println!("spec.replicas owned by {owners:?}");
    assert!(owners.iter().any(|m| m == "sluice-scaler"), "the autoscaler must own spec.replicas: {owners:?}");

    let start = Instant::now();
    let mut seen = BTreeMap::new();
    let mut timeline = Timeline::default();
    let sending = async {
        send_burst(&queue).await?;
        let sent = start.elapsed();
        println!("[{:6.1}s] sent {MESSAGES} messages ({SENDERS} senders)", sent.as_secs_f64());
        anyhow::Ok(sent)
    };
    let (sent, watched) =
        tokio::join!(sending, watch(&system, &sink, &queue, start, &mut seen, &mut timeline));
    timeline.sent = Some(sent?);
    watched?;

    let stats = sink.stats();
    let counts = queue.approximate_counts().await?;
    println!(
        "timeline from the burst: sent {}, first scale-up {}, spec.replicas at max {}, {MAX_REPLICAS} processes {}, \
         drained {}, back to zero {}",
        secs(timeline.sent),
        secs(timeline.first_scale_up),
        secs(timeline.at_max),
        secs(timeline.max_processes),
        secs(timeline.drained),
        secs(timeline.zero)
    );
    println!(
        "sink: {} distinct, {} duplicates, {} requests, {} refused; queue {counts:?}",
        stats.distinct, stats.duplicates, stats.accepted, stats.rejected
    );
    assert_eq!(timeline.peak_replicas, MAX_REPLICAS, "spec.replicas never reached max");
    assert_eq!(timeline.peak_processes, MAX_REPLICAS as usize, "never {MAX_REPLICAS} reader processes");
    assert_eq!(stats.distinct, MESSAGES as u64, "messages lost (or foreign ids) at the sink");
    assert_eq!(stats.rejected, 0, "the sink refused requests");
    assert_eq!(counts.total(), 0, "queue not empty: {counts:?}");

    // Removed readers drained: no crash restarts, any recorded exit was clean, logs say drained.
    for p in seen.values() {
        assert_eq!(p.restarts, 0, "{} crashed and was restarted (last exit {:?})", p.name, p.last_exit);
        if let Some(exit) = &p.last_exit {
            assert!(exit.contains("status: 0"), "{} exited uncleanly: {exit}", p.name);
        }
    }
    let (stopped, drained) = check_drains(&system)?;
    println!(
        "{} reader processes seen, {stopped} stopped by scale-down without a SIGKILL or a crash, \
         {drained} of them drained in-flight work to zero left",
        seen.len()
    );
    assert!(drained >= MAX_REPLICAS as usize, "only {drained} readers drained");
    assert_eq!(sink.stats().distinct, MESSAGES as u64, "a delivery arrived after the fleet reached zero");

    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
