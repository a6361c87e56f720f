//! A declarative replay of dead letters, end to end as separate processes: LocalStack, the local
//! control plane with its process runner, the operator, and a reader.
//!
//! 300 messages are dead-lettered (to the source's sqs dead-letter sink) while the HTTP sink
//! refuses them with 400; the sink is fixed; `spec.replay` asks for them back at 50 messages/s.
//! The operator is SIGKILLed once the status shows about half replayed and started again.
//!
//! What must hold: every one of the 300 reaches the sink, the dead-letter queue is empty,
//! `status.replay` says Completed with `replayed: 300` and nothing uncertain, and no message was
//! replayed twice: each body reaches the sink under one SQS MessageId only (a second replay of a
//! message would be a new message with a new id; the same id twice is the reader's at-least-once
//! redelivery, which is printed but allowed).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use axum::http::StatusCode;
use kube::Api;
use nix::sys::signal::Signal;
use serde_json::json;
use sluice_crds::{ReplayStatus, SqsSource};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, seq_of, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const MESSAGES: usize = 300;
const RATE: u32 = 50;

/// The source: one reader, an http sink and an sqs dead-letter sink; `replay` when asked.
fn source_yaml(
    queue: &str,
    endpoint: &str,
    sink: &str,
    dlq: &str,
    replay: Option<serde_json::Value>,
) -> Result<String> {
    let yaml = SourceYaml::new("replay", queue, endpoint)
        .visibility_timeout(5)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(1, 1)
        .yaml();
    let mut doc: serde_json::Value = serde_yaml::from_str(&yaml)?;
    doc["spec"]["deadLetterSink"] = json!({"name": "poison", "sqs": {"queueUrl": dlq, "endpoint": endpoint}});
    if let Some(replay) = replay {
        doc["spec"]["replay"] = replay;
    }
    Ok(serde_yaml::to_string(&doc)?)
}

async fn replay_status(system: &System) -> Result<Option<ReplayStatus>> {
    let api: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    Ok(api.get("replay").await?.status.and_then(|s| s.replay))
}

/// Waits until `status.replay` satisfies `done`, describing it otherwise.
async fn wait_replay(
    system: &System,
    within: Duration,
    done: impl Fn(&ReplayStatus) -> bool,
) -> Result<ReplayStatus> {
    poll::until(within, Duration::from_millis(50), || async {
        Ok(match replay_status(system).await? {
            Some(s) if done(&s) => Check::Met(s),
            other => Check::NotYet(format!("status.replay is {other:?}")),
        })
    })
    .await
    .with_context(|| format!("logs under {}", system.state_dir().display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_survives_an_operator_kill_and_replays_each_dead_letter_once() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(5), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "replay", false, &options).await?;
    let dlq = TestQueue::create(&sqs, "replay-dlq", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    sink.refuse(StatusCode::BAD_REQUEST, "");
    let mut system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-replay")).await?;
    system.apply_source(&source_yaml(&queue.url, &endpoint, &sink.url(), &dlq.url, None)?).await?;
    queue.send_batch(MESSAGES).await?;

    // Every message is refused and dead-lettered.
    poll::until(Duration::from_secs(180), Duration::from_millis(500), || async {
        let (dead, left) = (dlq.approximate_counts().await?, queue.approximate_counts().await?);
        Ok(Check::met_if(dead.visible as usize == MESSAGES && left.total() == 0, || {
            format!("dead-letter queue {dead:?}, source queue {left:?}")
        }))
    })
    .await
    .with_context(|| format!("logs under {}", system.state_dir().display()))?;
    println!("{MESSAGES} messages dead-lettered while the sink answered 400");

    // The sink is fixed; the replay is asked for.
    sink.accept_all();
    let replay = json!({"id": "after-the-fix", "ratePerSecond": RATE});
    system.apply_source(&source_yaml(&queue.url, &endpoint, &sink.url(), &dlq.url, Some(replay))?).await?;
    let started = Instant::now();
    let at_kill =
        wait_replay(&system, Duration::from_secs(60), |s| s.replayed >= MESSAGES as u64 / 2).await?;
    system.stop_operator(Signal::SIGKILL)?;
    println!(
        "operator SIGKILLed with status.replay at {} replayed (batch journal {:?})",
        at_kill.replayed, at_kill.batch
    );
    system.start_operator()?;

    let done = wait_replay(&system, Duration::from_secs(180), |s| s.phase == "Completed").await?;
    let elapsed = started.elapsed();
    sink.wait_for_distinct(MESSAGES as u64, Duration::from_secs(60)).await?;
    poll::until(Duration::from_secs(60), Duration::from_millis(500), || async {
        let (dead, left) = (dlq.approximate_counts().await?, queue.approximate_counts().await?);
        Ok(Check::met_if(dead.total() == 0 && left.total() == 0, || {
            format!("dead-letter queue {dead:?}, source queue {left:?}")
        }))
    })
    .await?;

    // Each body under how many distinct SQS MessageIds.
    let mut ids_by_seq: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let events = sink.events();
    for event in &events {
        let seq =
            seq_of(&String::from_utf8_lossy(&event.body)).context("a delivered body without its seq")?;
        ids_by_seq.entry(seq).or_default().insert(event.id.clone());
    }
    let replayed_twice: Vec<_> =
        ids_by_seq.iter().filter(|(_, ids)| ids.len() > 1).map(|(seq, _)| *seq).collect();
    let redelivered = events.len() - ids_by_seq.values().map(BTreeSet::len).sum::<usize>();
    println!(
        "replay {}: {} replayed, {} skipped, {} uncertain; {} of {MESSAGES} bodies delivered, {} replayed twice, {redelivered} reader redeliveries; {:.1} s from the request to Completed (about {:.0} messages/s with the restart), at {RATE} messages/s asked",
        done.id,
        done.replayed,
        done.skipped,
        done.uncertain,
        ids_by_seq.len(),
        replayed_twice.len(),
        elapsed.as_secs_f64(),
        MESSAGES as f64 / elapsed.as_secs_f64()
    );
    ensure!(
        done.replayed == MESSAGES as u64,
        "status.replay.replayed is {}, not {MESSAGES}: {done:?}",
        done.replayed
    );
    ensure!(done.uncertain == 0, "a batch was in flight at the kill: {done:?}");
    ensure!(ids_by_seq.len() == MESSAGES, "{} of {MESSAGES} bodies delivered", ids_by_seq.len());
    ensure!(replayed_twice.is_empty(), "replayed twice: {replayed_twice:?}");
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    dlq.delete().await?;
    Ok(())
}
