//! End-to-end: the autoscaler's `spec.scaling.fallback` while the queue's attributes cannot be read.
//!
//! As separate processes: LocalStack, the local control plane with its process runner, the
//! operator and the readers it asks for. The source names its queue through a switchable path
//! (`sluice_tests::outage`), so cutting the path makes every GetQueueAttributes of the operator
//! fail (refused connections) while the queue itself stays whole. The source idles at zero with
//! the default fallback (`atLeastCurrent` 1 replica after 3 failed reads). Cut: the `Fallback`
//! condition goes ScalerBlind, then FallbackApplied with `status.fallback` naming the count, a
//! FallbackApplied event is published and the readers go from 0 to 1, and stay at 1 while the
//! path is down. Restored: the condition says QueueReadable, `status.fallback` is gone, a
//! FallbackEnded event is published, and the empty queue takes the source back to zero after its
//! idle cooldown.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use kube::Api;
use sluice_crds::SqsSource;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::outage::Outage;
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const SOURCE: &str = "blind";
/// How long the path stays cut once the fallback applied, while the test checks it holds.
const HELD_FOR: Duration = Duration::from_secs(8);
const WITHIN: Duration = Duration::from_secs(60);

/// The source's `Fallback` condition as (status, reason, message), and `status.fallback`.
async fn fallback_state(
    system: &System,
) -> Result<(Option<(String, String, String)>, Option<serde_json::Value>)> {
    let api: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let source = api.get(SOURCE).await?;
    let status = source.status.unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Fallback")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    Ok((condition, status.fallback.map(|f| serde_json::to_value(f).unwrap_or_default())))
}

async fn wait_reason(system: &System, reason: &str) -> Result<(String, String, String)> {
    poll::until(WITHIN, Duration::from_millis(200), || async {
        let (condition, _) = fallback_state(system).await?;
        Ok(match condition {
            Some(c) if c.1 == reason => Check::Met(c),
            other => Check::NotYet(format!("Fallback condition not {reason}: {other:?}")),
        })
    })
    .await
}

async fn wait_replicas(system: &System, replicas: i32) -> Result<()> {
    poll::until(WITHIN, Duration::from_millis(200), || async {
        let now = system.reader_replicas(SOURCE).await?;
        Ok(Check::met_if(now == Some(replicas), || format!("spec.replicas {now:?}, waiting for {replicas}")))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_scaler_applies_its_fallback_and_resumes_when_it_sees_again() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(10), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "e2e-fallback", false, &options).await?;
    let mut path = Outage::start(&endpoint).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-scaler-fallback"))
            .await?;
    let yaml = SourceYaml::new(SOURCE, &queue.url, &path.endpoint())
        .visibility_timeout(10)
        .sink("webhook", Sink::http(&sink.url()).timeout_ms(2000))
        .replicas(0, 3)
        .poll_interval(1)
        .scale_down_stabilization(2)
        .idle_cooldown(3)
        .yaml();
    system.apply_source(&yaml).await?;
    system.wait_idle_at_zero(SOURCE, WITHIN).await?;
    let readable = wait_reason(&system, "QueueReadable").await?;
    println!("idle at zero; Fallback {} {}: {}", readable.0, readable.1, readable.2);

    path.cut().await?;
    let cut_at = Instant::now();
    let blind = wait_reason(&system, "ScalerBlind").await?;
    println!("[{:5.1}s] Fallback {} ScalerBlind: {}", cut_at.elapsed().as_secs_f64(), blind.0, blind.2);
    ensure!(blind.0 == "False", "ScalerBlind is not False: {blind:?}");
    let applied = wait_reason(&system, "FallbackApplied").await?;
    let applied_after = cut_at.elapsed();
    println!("[{:5.1}s] Fallback {} FallbackApplied: {}", applied_after.as_secs_f64(), applied.0, applied.2);
    ensure!(applied.0 == "True", "FallbackApplied is not True: {applied:?}");
    wait_replicas(&system, 1).await?;
    println!("[{:5.1}s] spec.replicas 0 -> 1 while blind", cut_at.elapsed().as_secs_f64());
    let (_, fallback) = fallback_state(&system).await?;
    let fallback = fallback.expect("status.fallback while the fallback applies");
    println!("status.fallback: {fallback}");
    ensure!(fallback["behavior"] == "atLeastCurrent" && fallback["replicas"] == 1, "{fallback}");
    ensure!(fallback["consecutiveFailures"].as_u64() >= Some(3), "{fallback}");
    let note = system.wait_source_event(SOURCE, "FallbackApplied", WITHIN).await?;
    println!("event FallbackApplied: {note}");

    // Held while the path stays down: never back to zero, however long nothing was seen. The
    // condition may be missing for an interval (the local control plane's applies replace a list
    // whole, so the reconciler's status write drops it until the scaler's next interval), but
    // whenever it is there it says FallbackApplied.
    let holding = Instant::now();
    while holding.elapsed() < HELD_FOR {
        let replicas = system.reader_replicas(SOURCE).await?;
        ensure!(replicas == Some(1), "spec.replicas {replicas:?} while the fallback applies");
        let (condition, _) = fallback_state(&system).await?;
        if let Some(condition) = condition {
            ensure!(condition.1 == "FallbackApplied", "while cut the condition says {condition:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_reason(&system, "FallbackApplied").await?;

    path.restore().await?;
    let restored_at = Instant::now();
    let readable = wait_reason(&system, "QueueReadable").await?;
    println!(
        "[{:5.1}s after restore] Fallback {} QueueReadable",
        restored_at.elapsed().as_secs_f64(),
        readable.0
    );
    let note = system.wait_source_event(SOURCE, "FallbackEnded", WITHIN).await?;
    println!("event FallbackEnded: {note}");
    let (_, fallback) = fallback_state(&system).await?;
    ensure!(fallback.is_none(), "status.fallback stays after the queue is readable: {fallback:?}");
    system.wait_idle_at_zero(SOURCE, WITHIN).await?;
    println!("[{:5.1}s after restore] back to zero: the queue is empty", restored_at.elapsed().as_secs_f64());
    ensure!(sink.stats().distinct == 0, "a message appeared from nowhere: {:?}", sink.stats());

    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
