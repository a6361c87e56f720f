//! `sluice-bench-s3-objects`: what the s3 sink leaves in the bucket per 10,000 messages, before
//! (one object per delivered batch: a reader built from the commit before buffering, given with
//! `--before-reader`) and after (the buffer's default hints, plain, gzip and zstd), side by side on
//! the same LocalStack.
//!
//! Each run makes a fresh standard queue, fills it with N messages of `--body-bytes` JSON bodies
//! (not timed), starts one standalone reader (`--source FILE`, atLeastOnce, defaults otherwise)
//! and waits until SQS reports the queue empty: a message is deleted only once the object holding
//! it is written, so then every object is there. It reports objects, objects per 10,000
//! messages, bytes stored and bytes per message.
//!
//! Run: `cargo build --workspace --bins && target/debug/sluice-bench-s3-objects --before-reader
//! PATH/TO/OLD/sluice-reader`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use sluice_tests::localstack::{LocalStack, SendOptions, TestQueue, s3_client, sqs_client};
use sluice_tests::s3_objects;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;
use sluice_tests::system::bin_dir;

/// Concurrent SendMessageBatch loops filling a queue.
const SENDERS: usize = 8;
/// Longest a single run may take.
const RUN_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Parser)]
#[command(name = "sluice-bench-s3-objects")]
struct Args {
    /// Messages per run.
    #[arg(long, default_value_t = 10_000)]
    messages: usize,
    /// Body size of each message, bytes.
    #[arg(long, default_value_t = 256)]
    body_bytes: usize,
    /// A `sluice-reader` from before buffering: its per-batch objects are the baseline.
    #[arg(long)]
    before_reader: Option<PathBuf>,
}

/// One configuration: which reader, and the sink's `compression` (`None`: the field unset).
struct Config {
    label: &'static str,
    reader: PathBuf,
    compression: Option<&'static str>,
}

struct Sample {
    label: &'static str,
    objects: usize,
    bytes: u64,
    seconds: f64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let after = bin_dir().join("sluice-reader");
    let mut configs = Vec::new();
    if let Some(before) = &args.before_reader {
        configs.push(Config { label: "before (per batch)", reader: before.clone(), compression: None });
    }
    for (label, compression) in
        [("after, default hints", None), ("after, gzip", Some("gzip")), ("after, zstd", Some("zstd"))]
    {
        configs.push(Config { label, reader: after.clone(), compression });
    }
    let endpoint = LocalStack::ensure().await?;
    let bucket = format!(
        "bench-s3-objects-{}",
        std::iter::repeat_with(fastrand::lowercase).take(8).collect::<String>()
    );
    s3_client(&endpoint).create_bucket().bucket(&bucket).send().await?;
    println!(
        "sluice-bench-s3-objects: {} messages of {} body bytes per run; LocalStack {endpoint}",
        args.messages, args.body_bytes
    );
    let mut samples = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        samples.push(run(&args, &endpoint, &bucket, &format!("run{i}/"), config).await?);
    }
    let per = |n: f64| n * 10_000.0 / args.messages as f64;
    println!(
        "{:<22} {:>8} {:>14} {:>12} {:>10} {:>8}",
        "sink", "objects", "objects/10k", "bytes", "bytes/msg", "seconds"
    );
    for s in &samples {
        println!(
            "{:<22} {:>8} {:>14.1} {:>12} {:>10.1} {:>8.1}",
            s.label,
            s.objects,
            per(s.objects as f64),
            s.bytes,
            s.bytes as f64 / args.messages as f64,
            s.seconds
        );
    }
    if let Some(before) = samples.first().filter(|_| args.before_reader.is_some()) {
        for s in &samples[1..] {
            println!(
                "{}: {:.0}x fewer objects, {:.2}x the bytes of {}",
                s.label,
                before.objects as f64 / s.objects.max(1) as f64,
                s.bytes as f64 / before.bytes.max(1) as f64,
                before.label
            );
        }
    }
    Ok(())
}

async fn run(args: &Args, endpoint: &str, bucket: &str, prefix: &str, config: &Config) -> Result<Sample> {
    let queue = TestQueue::create(&sqs_client(endpoint), "bench-s3-objects", false).await?;
    // Several senders at once: the queue handle numbers their messages apart.
    let options = SendOptions { pad_to: Some(args.body_bytes), ..SendOptions::default() };
    let share = |i: usize| args.messages / SENDERS + usize::from(i < args.messages % SENDERS);
    let sends = (0..SENDERS).map(|i| queue.send_batch_with(share(i), options));
    for sent in futures::future::join_all(sends).await {
        sent?;
    }
    let mut sink = Sink::s3(bucket, prefix, endpoint);
    if let Some(compression) = config.compression {
        sink = sink.compression(compression);
    }
    let yaml = SourceYaml::bare("bench", &queue.url, endpoint).at_least_once().sink("archive", sink).yaml();
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let reader = Reader::start_binary(dir.path(), &yaml, &config.reader)?;
    loop {
        if queue.approximate_counts().await?.total() == 0 {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            bail!("{}: the queue was not empty after {RUN_LIMIT:?}; log: {}", config.label, reader.log());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(reader);
    let listed = s3_objects::list(&s3_client(endpoint), bucket, prefix).await?;
    queue.delete().await?;
    Ok(Sample {
        label: config.label,
        objects: listed.len(),
        bytes: listed.iter().map(|(_, size)| size).sum(),
        seconds,
    })
}
