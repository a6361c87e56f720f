//! End-to-end: `spec.suspend` pauses an exactly-once source mid-stream and resumes it.
//!
//! Two readers deliver numbered messages to an S3 sink (one object per reader and committed
//! epoch). Once part of the stream is committed the source is suspended: every reader process must
//! exit (draining: its open epoch committed or aborted, as in a scale to zero), the status must say
//! Suspended (the Scaling condition, with its time) and a `Suspended` event must be published;
//! while suspended no reader runs and the checkpoint coordinator opens no epoch. Resumed, the
//! readers come back, a `Resumed` event is published, and in the end every message is in the
//! committed S3 output exactly once: none lost, none duplicated.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sluice_crds::SqsSource;
use sluice_protocol::{Checkpoint, checkpoint_configmap_name};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, s3_client, seq_of, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const SOURCE: &str = "paused";
const MESSAGES: u64 = 3_000;
const PREFIX: &str = "out";
/// How long the source stays suspended while the test watches it stand still.
const SUSPENDED_FOR: Duration = Duration::from_secs(12);

fn source_yaml(queue: &TestQueue, bucket: &str, endpoint: &str, suspend: bool) -> String {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .visibility_timeout(30)
        .exactly_once(2)
        // Slow enough that the suspend lands mid-stream.
        .rate_limit(60)
        .sink("archive", Sink::s3(bucket, &format!("{PREFIX}/"), endpoint))
        .replicas(2, 2)
        .suspend(suspend)
        .yaml()
}

/// How often each sequence number is in the committed S3 output.
async fn s3_counts(client: &aws_sdk_s3::Client, bucket: &str) -> Result<BTreeMap<u64, u32>> {
    let mut counts = BTreeMap::new();
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(format!("{PREFIX}/"))
            .set_continuation_token(token)
            .send()
            .await
            .context("ListObjectsV2")?;
        for object in page.contents() {
            let key = object.key().unwrap_or_default();
            let got = client.get_object().bucket(bucket).key(key).send().await.context("GetObject")?;
            let bytes = got.body.collect().await.context("reading an object")?.into_bytes();
            for line in String::from_utf8_lossy(&bytes).lines().filter(|l| !l.trim().is_empty()) {
                let record: serde_json::Value = serde_json::from_str(line).context("a JSON line")?;
                if let Some(seq) = seq_of(record["body"].as_str().unwrap_or_default()) {
                    *counts.entry(seq).or_default() += 1;
                }
            }
        }
        token = page.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            return Ok(counts);
        }
    }
}

async fn open_epoch(api: &Api<ConfigMap>) -> Result<Option<u64>> {
    let cm = api.get_opt(&checkpoint_configmap_name(SOURCE)).await?;
    match cm.and_then(|cm| cm.data) {
        Some(data) if data.contains_key("openEpoch") => Ok(Some(Checkpoint::from_data(&data)?.open)),
        _ => Ok(None),
    }
}

/// Suspends, checks the source stands still, and prints what it saw.
async fn suspend_and_watch(system: &System, yaml: &str, start: Instant) -> Result<()> {
    system.apply_source(yaml).await?;
    println!("[{:6.1}s] applied spec.suspend: true", start.elapsed().as_secs_f64());
    poll::until(Duration::from_secs(120), Duration::from_millis(250), || async {
        let alive = system.alive_readers(SOURCE).len();
        Ok(if alive == 0 { Check::Met(()) } else { Check::NotYet(format!("{alive} reader processes alive")) })
    })
    .await?;
    println!("[{:6.1}s] no reader process left", start.elapsed().as_secs_f64());
    let note = system.wait_source_event(SOURCE, "Suspended", Duration::from_secs(30)).await?;
    let sources: Api<SqsSource> = Api::namespaced(system.client.clone(), &system.namespace);
    let status = sources.get(SOURCE).await?.status.unwrap_or_default();
    let scaling = status.conditions.iter().find(|c| c.type_ == "Scaling").context("no Scaling condition")?;
    println!(
        "Suspended event: {note}\nScaling condition: {} {} since {}: {}\nlastScaleReason: {:?}",
        scaling.status,
        scaling.reason,
        scaling.last_transition_time.0,
        scaling.message,
        status.last_scale_reason
    );
    assert_eq!((scaling.status.as_str(), scaling.reason.as_str()), ("False", "Suspended"));
    assert_eq!(status.desired_replicas, Some(0), "desiredReplicas while suspended");
    let checkpoints: Api<ConfigMap> = Api::namespaced(system.client.clone(), &system.namespace);
    let epoch = open_epoch(&checkpoints).await?;
    let until = Instant::now() + SUSPENDED_FOR;
    while Instant::now() < until {
        assert!(system.alive_readers(SOURCE).is_empty(), "a reader process runs while suspended");
        assert_eq!(system.reader_replicas(SOURCE).await?, Some(0), "spec.replicas rose while suspended");
        assert_eq!(open_epoch(&checkpoints).await?, epoch, "the coordinator opened an epoch while suspended");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "[{:6.1}s] stood still for {SUSPENDED_FOR:?}: no reader, open epoch {epoch:?}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_source_suspended_mid_stream_resumes_without_loss_or_duplicates() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let s3 = s3_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "e2e-suspend", false, &options).await?;
    let bucket = format!("e2e-suspend-{}", std::process::id());
    s3.create_bucket().bucket(&bucket).send().await.with_context(|| format!("CreateBucket {bucket}"))?;
    let system =
        System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-suspend")).await?;
    system.apply_source(&source_yaml(&queue, &bucket, &endpoint, false)).await?;
    system.wait_ready_readers(SOURCE, 2, Duration::from_secs(90)).await?;

    // Sent while the readers deliver and the suspend lands: on a loaded machine the 300 sequential
    // SendMessageBatch calls take longer than the rate-limited readers need to deliver half of the
    // stream, so waiting for the send to finish first could let everything through before the
    // suspend. Mid-stream: part of the output committed, most still to come.
    let start = Instant::now();
    let watch = async {
        poll::until(Duration::from_secs(180), Duration::from_millis(500), || async {
            let committed = s3_counts(&s3, &bucket).await?.len();
            Ok(if committed >= 300 {
                Check::Met(())
            } else {
                Check::NotYet(format!("{committed} committed"))
            })
        })
        .await?;
        let before = s3_counts(&s3, &bucket).await?.len();
        println!("[{:6.1}s] {before} messages committed; suspending", start.elapsed().as_secs_f64());
        suspend_and_watch(&system, &source_yaml(&queue, &bucket, &endpoint, true), start).await
    };
    let (sent, watched) = tokio::join!(queue.send_batch(MESSAGES as usize), watch);
    sent?;
    watched?;
    println!("[{:6.1}s] all {MESSAGES} messages were sent", start.elapsed().as_secs_f64());
    let during = s3_counts(&s3, &bucket).await?.len();
    let waiting = queue.approximate_counts().await?;
    println!("while suspended: {during} committed, queue {waiting:?}");
    assert!(
        (during as u64) < MESSAGES,
        "everything was delivered before the suspend took effect: not mid-stream"
    );

    system.apply_source(&source_yaml(&queue, &bucket, &endpoint, false)).await?;
    println!("[{:6.1}s] applied spec.suspend: false", start.elapsed().as_secs_f64());
    let note = system.wait_source_event(SOURCE, "Resumed", Duration::from_secs(30)).await?;
    println!("Resumed event: {note}");
    let counts = poll::until(Duration::from_secs(300), Duration::from_secs(1), || async {
        let counts = s3_counts(&s3, &bucket).await?;
        let empty = queue.approximate_counts().await?.total() == 0;
        Ok(if counts.len() as u64 >= MESSAGES && empty {
            Check::Met(counts)
        } else {
            Check::NotYet(format!("{} committed, queue empty: {empty}", counts.len()))
        })
    })
    .await?;
    // A late commit would show up as a duplicate: look again after a few checkpoint intervals.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let counts =
        if s3_counts(&s3, &bucket).await? == counts { counts } else { s3_counts(&s3, &bucket).await? };
    let missing = (0..MESSAGES).filter(|s| !counts.contains_key(s)).count();
    let duplicates: u32 = counts.values().map(|c| c - 1).sum();
    println!(
        "[{:6.1}s] S3 output: {} distinct of {MESSAGES}, {missing} lost, {duplicates} duplicates",
        start.elapsed().as_secs_f64(),
        counts.len()
    );
    if missing != 0 || duplicates != 0 {
        bail!("{missing} lost, {duplicates} duplicated; logs under {}", system.state_dir().display());
    }
    drop(system);
    queue.delete().await?;
    Ok(())
}
