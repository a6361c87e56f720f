//! The s3 sink's at-least-once buffering, end to end: LocalStack S3 and SQS and the real reader
//! process (`sluice-reader --source FILE`).
//!
//! 6,000 messages of equal-sized records with hints of 1 MiB / 10 s: the objects are as many as
//! the byte hint predicts from the record sizes (printed beside the count), every record is in
//! them, and the queue ends empty. Then the same with the reader SIGKILLed mid-run and started
//! again: records buffered in the killed process were never written, so their messages were never
//! deleted; they come back and nothing is lost (duplicates, the at-least-once price, are printed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_tests::localstack::{
    LocalStack, QueueOptions, SendOptions, TestQueue, s3_client, seq_of, sqs_client,
};
use sluice_tests::s3_objects::{self, Object};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

const MESSAGES: u64 = 6_000;
const MAX_BYTES: u64 = 1 << 20;
const MAX_SECONDS: u32 = 10;
/// Every body is this long, so every line is (nearly) the same size and the count is predictable.
const BODY_BYTES: usize = 1000;
const VISIBILITY: u32 = 10;
/// From the start until every record is written and the queue is empty.
const BOUND: Duration = Duration::from_secs(300);

struct Run {
    queue: TestQueue,
    bucket: String,
    prefix: String,
    endpoint: String,
}

impl Run {
    async fn new(name: &str) -> Result<Self> {
        let endpoint = LocalStack::ensure().await?;
        let options = QueueOptions { visibility_timeout: Some(VISIBILITY), ..QueueOptions::default() };
        let queue = TestQueue::create_with(&sqs_client(&endpoint), name, false, &options).await?;
        let bucket =
            format!("{name}-{}", std::iter::repeat_with(fastrand::lowercase).take(10).collect::<String>());
        s3_client(&endpoint).create_bucket().bucket(&bucket).send().await.context("CreateBucket")?;
        let send = SendOptions { pad_to: Some(BODY_BYTES), ..SendOptions::default() };
        queue.send_batch_with(MESSAGES as usize, send).await?;
        Ok(Self { queue, bucket, prefix: format!("{name}/"), endpoint })
    }

    fn yaml(&self) -> String {
        let sink = Sink::s3(&self.bucket, &self.prefix, &self.endpoint).buffer(MAX_BYTES, 1000, MAX_SECONDS);
        SourceYaml::bare("buffered", &self.queue.url, &self.endpoint)
            .at_least_once()
            .visibility_timeout(VISIBILITY)
            .sink("archive", sink)
            .yaml()
    }

    /// Wait until the queue is empty and every record is written; the objects then.
    async fn until_done(&self, started: Instant) -> Result<Vec<Object>> {
        let s3 = s3_client(&self.endpoint);
        while started.elapsed() < BOUND {
            let objects = s3_objects::read_all(&s3, &self.bucket, &self.prefix).await?;
            let counts = tally(&objects)?;
            if counts.len() as u64 == MESSAGES && self.queue.approximate_counts().await?.total() == 0 {
                return Ok(objects);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let objects = s3_objects::read_all(&s3, &self.bucket, &self.prefix).await?;
        bail!("after {BOUND:?}: {} of {MESSAGES} records written", tally(&objects)?.len())
    }
}

/// How often each sequence number is in `objects`.
fn tally(objects: &[Object]) -> Result<BTreeMap<u64, u32>> {
    let mut counts = BTreeMap::new();
    for object in objects {
        for line in &object.lines {
            let record: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("{}: {line}", object.key))?;
            let seq = seq_of(record["body"].as_str().unwrap_or_default()).context("a record of ours")?;
            *counts.entry(seq).or_default() += 1;
        }
    }
    Ok(counts)
}

/// Objects the byte hint makes of `MESSAGES` records of the line sizes seen: an object closes
/// with the record that reaches `MAX_BYTES`, so it holds `ceil(MAX_BYTES / line)` records.
/// Answers the prediction for the shortest and the longest line (they must agree).
fn predicted(objects: &[Object]) -> (u64, u64, usize, usize) {
    let sizes = objects.iter().flat_map(|o| o.lines.iter().map(|l| l.len() + 1));
    let (short, long) = sizes.fold((usize::MAX, 0), |(s, l), n| (s.min(n), l.max(n)));
    let count = |line: usize| MESSAGES.div_ceil(MAX_BYTES.div_ceil(line as u64));
    (count(short), count(long), short, long)
}

fn ensure_none_lost(objects: &[Object], what: &str) -> Result<u64> {
    let counts = tally(objects)?;
    let missing: Vec<u64> = (0..MESSAGES).filter(|s| !counts.contains_key(s)).collect();
    ensure!(
        missing.is_empty(),
        "{what}: {} records missing, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    Ok(counts.values().map(|&c| u64::from(c)).sum::<u64>() - MESSAGES)
}

#[tokio::test(flavor = "multi_thread")]
async fn six_thousand_records_make_the_objects_the_hints_predict_and_survive_a_sigkill() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // A clean run: the count the hints predict.
    let run = Run::new("s3buf-clean").await?;
    let started = Instant::now();
    let reader = Reader::start(dir.path(), &run.yaml())?;
    let objects = run.until_done(started).await?;
    drop(reader);
    let (low, high, short, long) = predicted(&objects);
    let duplicates = ensure_none_lost(&objects, "clean run")?;
    println!(
        "clean: {MESSAGES} records of {short}-{long} bytes a line, hints {MAX_BYTES} bytes / {MAX_SECONDS} s: \
         predicted {low} objects, actual {} ({duplicates} duplicates, {:.1}s)",
        objects.len(),
        started.elapsed().as_secs_f64()
    );
    ensure!(low == high, "the shortest and longest lines predict {low} and {high} objects");
    ensure!(objects.len() as u64 == low, "{} objects, the hints predict {low}", objects.len());

    // The reader SIGKILLed once its first object is written, then started again.
    let run = Run::new("s3buf-kill").await?;
    let (first_dir, second_dir) = (dir.path().join("first"), dir.path().join("second"));
    std::fs::create_dir_all(&first_dir)?;
    std::fs::create_dir_all(&second_dir)?;
    let started = Instant::now();
    let reader = Reader::start(&first_dir, &run.yaml())?;
    let s3 = s3_client(&run.endpoint);
    while s3_objects::list(&s3, &run.bucket, &run.prefix).await?.is_empty() {
        ensure!(started.elapsed() < BOUND, "no object written in {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kill(Pid::from_raw(reader.pid() as i32), Signal::SIGKILL)?;
    let before = s3_objects::list(&s3, &run.bucket, &run.prefix).await?.len();
    println!("[{:5.1}s] SIGKILLed the reader after {before} object(s)", started.elapsed().as_secs_f64());
    drop(reader);
    let _again = Reader::start(&second_dir, &run.yaml())?;
    let objects = run.until_done(started).await?;
    let duplicates = ensure_none_lost(&objects, "killed run")?;
    println!(
        "SIGKILL: every one of {MESSAGES} records written, {duplicates} duplicates, {} objects, {:.1}s",
        objects.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
