//! End to end, as separate processes (LocalStack, the local control plane with its process runner,
//! the operator, a reader process): a sink whose bucket does not exist turns the source's
//! `SinksHealthy` condition False with a Warning event, within the readers'
//! `--unready-after-seconds` (60 s, the default the operator leaves) plus one report (at most 5 s
//! later) and one operator tick (5 s); once the bucket exists it turns True again with a Normal
//! event, and every message is delivered and deleted. The reader's WARN lines for the fault are
//! counted in its log (one per sink and kind per 10 s at most).
//!
//! The receive bound under the backoff schedule and readiness are shown for the reader alone in
//! reader/tests/failures.rs (1 + 2 + 4 + 8 + 16 s: at most 5 receives per message in 30 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::ListParams;
use sluice_crds::SqsSource;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, s3_client, sqs_client};
use sluice_tests::system::System;

const SOURCE: &str = "health";
const MESSAGES: usize = 5;

fn bin_dir() -> PathBuf {
    sluice_tests::system::bin_dir()
}

fn source_yaml(queue: &TestQueue, endpoint: &str, bucket: &str) -> String {
    format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: SqsSource
metadata:
  name: {SOURCE}
  namespace: default
spec:
  queues:
    - url: {url}
      endpoint: {endpoint}
  receive:
    waitTimeSeconds: 1
  sinks:
    - name: archive
      s3:
        bucket: {bucket}
        endpoint: {endpoint}
  delivery:
    retry:
      maxAttempts: 1
  scaling:
    minReplicas: 1
    maxReplicas: 1
  reader:
    logLevel: info
"#,
        url = queue.url
    )
}

/// The source's `SinksHealthy` condition, once it has `status`.
async fn wait_condition(system: &System, status: &str, timeout: Duration) -> Result<Condition> {
    let api: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let start = Instant::now();
    loop {
        let source = api.get(SOURCE).await?;
        let found = source.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "SinksHealthy"));
        if let Some(c) = found.filter(|c| c.status == status) {
            return Ok(c);
        }
        if start.elapsed() > timeout {
            bail!(
                "SinksHealthy is not {status} after {timeout:?}; logs under {}",
                system.state_dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reasons of the source's events from the sink health follower.
async fn sink_events(system: &System) -> Result<Vec<(String, String)>> {
    let api: Api<Event> = Api::namespaced(system.client.clone(), &system.namespace);
    let events = api.list(&ListParams::default()).await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(SOURCE))
        .filter(|e| e.action.as_deref() == Some("SinkHealth"))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect())
}

/// The reader pods' WARN lines about the sink `archive`, from the runner's logs.
fn sink_warnings(state_dir: &Path) -> usize {
    let logs = walk(state_dir).into_iter().filter(|p| {
        p.extension().is_some_and(|e| e == "log")
            && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{SOURCE}-reader")))
    });
    logs.filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| {
            text.lines().filter(|l| l.contains("WARN") && l.contains("delivery to sink archive")).count()
        })
        .sum()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_turns_sinks_healthy_false_then_true_with_nothing_lost() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs_client(&endpoint), "e2e-sinkhealth", false, &options).await?;
    let bucket = format!("e2e-sinkhealth-{}", fastrand::u64(..));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-sinkhealth");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&bin_dir(), &dir).await?;
    system.start_operator()?;
    system.apply_source(&source_yaml(&queue, &endpoint, &bucket)).await?;
    system.wait_ready_readers(SOURCE, 1, Duration::from_secs(60)).await?;
    queue.send_batch(MESSAGES).await?;
    let fault = Instant::now();

    let unhealthy = wait_condition(&system, "False", Duration::from_secs(100)).await?;
    let to_false = fault.elapsed();
    println!(
        "SinksHealthy False after {:.1} s: {}: {}",
        to_false.as_secs_f64(),
        unhealthy.reason,
        unhealthy.message
    );
    assert_eq!(unhealthy.reason, "SinkFailing");
    assert!(
        unhealthy.message.contains("sink archive") && unhealthy.message.contains(&bucket),
        "{}",
        unhealthy.message
    );
    assert!(!unhealthy.message.contains('\n'), "one line: {}", unhealthy.message);
    let events = sink_events(&system).await?;
    assert!(events.contains(&("Warning".into(), "SinksUnhealthy".into())), "events: {events:?}");

    s3_client(&endpoint).create_bucket().bucket(&bucket).send().await.context("CreateBucket")?;
    let fixed = Instant::now();
    let healthy = wait_condition(&system, "True", Duration::from_secs(90)).await?;
    println!(
        "SinksHealthy True {:.1} s after the bucket was created: {}",
        fixed.elapsed().as_secs_f64(),
        healthy.message
    );
    let events = sink_events(&system).await?;
    assert!(events.contains(&("Normal".into(), "SinksHealthy".into())), "events: {events:?}");

    let faulty_for = fixed.duration_since(fault);
    let warnings = sink_warnings(system.state_dir());
    let bound = 2 + faulty_for.as_secs() as usize / 10;
    println!(
        "{warnings} WARN lines about sink archive in {:.0} s of failures (bound {bound})",
        faulty_for.as_secs_f64()
    );
    assert!((1..=bound).contains(&warnings), "{warnings} WARN lines; logs under {}", dir.display());

    let start = Instant::now();
    loop {
        let counts = queue.approximate_counts().await?;
        if counts.total() == 0 {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("queue not empty once the bucket exists: {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let objects = s3_client(&endpoint).list_objects_v2().bucket(&bucket).send().await?;
    let written = objects.contents().len();
    println!("queue empty, {written} objects in the bucket");
    assert!(written >= 1, "nothing was written");
    drop(system);
    queue.delete().await?;
    Ok(())
}
