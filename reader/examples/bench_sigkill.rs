//! Benchmark: duplicates per SIGKILL. A producer sends at a fixed rate, a reader delivers to an
//! HTTP sink where some deliveries are slow, the reader is killed (SIGKILL) mid-stream, and a
//! second reader of the same build finishes the queue. Whatever the killed reader had delivered
//! but not yet deleted is delivered again: the sink counts those duplicates. Two builds run side
//! by side, alternating which goes first, on fresh queues and the same sink. Not a test; run it
//! with
//!
//! ```sh
//! cargo build -p sluice-reader --bin sluice-reader --example bench_sigkill
//! target/debug/examples/bench_sigkill --before /tmp/sluice-reader-before \
//!     --after target/debug/sluice-reader --rounds 3
//! ```
//!
//! Why this shape: a reader that deletes a receive batch only when its slowest message is done
//! holds delivered messages undeleted for as long as that slowest delivery takes; a kill then
//! redelivers all of them. The figure that matters is duplicates per kill at a given rate.

#![forbid(unsafe_code)]

#[path = "bench_vs_loop/child.rs"]
#[allow(dead_code)]
mod child;
#[allow(dead_code)] // the queue filler is for the other bench
#[path = "bench_vs_loop/queue.rs"]
mod queue;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use clap::Parser;
use sluice_tests::source::{Sink as SinkSpec, SourceYaml};

#[derive(Parser)]
#[command(about = "duplicates per SIGKILL of sluice-reader, two builds side by side, on LocalStack")]
struct Cli {
    /// The reader build measured first in odd rounds.
    #[arg(long)]
    before: PathBuf,
    #[arg(long)]
    after: PathBuf,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Messages per second sent while the first reader runs.
    #[arg(long, default_value_t = 100)]
    rate: usize,
    /// How long the first reader runs before the SIGKILL.
    #[arg(long, default_value_t = 8)]
    run_seconds: u64,
    /// Every n-th message is slow at the sink.
    #[arg(long, default_value_t = 20)]
    slow_every: usize,
    /// How long a slow delivery takes.
    #[arg(long, default_value_t = 5000)]
    slow_ms: u64,
    #[arg(long, default_value = "http://127.0.0.1:4566")]
    endpoint: String,
}

/// Times each `ce-id` was accepted; bodies starting `slow-<ms>` are answered after that delay.
#[derive(Clone, Default)]
struct Sink {
    seen: Arc<Mutex<HashMap<String, u64>>>,
}

async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let body = String::from_utf8_lossy(&body);
    if let Some(ms) = body.strip_prefix("slow-").and_then(|r| r.split('-').next()?.parse::<u64>().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let id = headers.get("ce-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    *sink.seen.lock().unwrap_or_else(|e| e.into_inner()).entry(id).or_default() += 1;
    StatusCode::OK
}

impl Sink {
    /// (distinct ids, duplicates).
    fn figures(&self) -> (usize, u64) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        (seen.len(), seen.values().map(|n| n - 1).sum())
    }
}

fn start_reader(binary: &PathBuf, dir: &tempfile::TempDir, yaml: &str, n: usize) -> Result<Child, String> {
    let source = dir.path().join(format!("source-{n}.yaml"));
    std::fs::write(&source, yaml).map_err(|e| e.to_string())?;
    let mut command = Command::new(binary);
    command
        .arg("--source")
        .arg(&source)
        .arg("--admin-addr=127.0.0.1:0")
        .arg("--shutdown-deadline-seconds=10");
    child::spawn_consumer(&mut command, &dir.path().join(format!("stderr-{n}")))
}

/// Send `rate` messages a second for `seconds`, ten a call every tenth of `rate`; answers the count.
async fn produce(client: &aws_sdk_sqs::Client, url: &str, a: &Cli) -> usize {
    let batches = a.rate as u64 * a.run_seconds / 10;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(10.0 / a.rate as f64));
    let mut sent = 0;
    for b in 0..batches as usize {
        tick.tick().await;
        let entries: Vec<SendMessageBatchRequestEntry> = (0..10)
            .map(|k| {
                let i = b * 10 + k;
                let body =
                    if i % a.slow_every == 0 { format!("slow-{}-{i}", a.slow_ms) } else { format!("m-{i}") };
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{k}"))
                    .message_body(body)
                    .build()
                    .unwrap()
            })
            .collect();
        if client.send_message_batch().queue_url(url).set_entries(Some(entries)).send().await.is_ok() {
            sent += 10;
        }
    }
    sent
}

async fn one_run(
    binary: &PathBuf,
    a: &Cli,
    client: &aws_sdk_sqs::Client,
    sink: &Sink,
    sink_url: &str,
) -> Result<(usize, u64), String> {
    *sink.seen.lock().unwrap_or_else(|e| e.into_inner()) = HashMap::new();
    let name = format!("bench-kill-{}", fastrand::u32(..));
    let url = queue::create(client, &name).await?;
    let yaml = SourceYaml::bare("bench", &url, &a.endpoint)
        .wait_time(1)
        .sink("web", SinkSpec::http(sink_url).timeout_ms(30_000).concurrency(32))
        .yaml();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut first = start_reader(binary, &dir, &yaml, 1)?;
    let sent = produce(client, &url, a).await;
    first.kill().map_err(|e| e.to_string())?;
    let _ = first.wait();
    let (at_kill, _) = sink.figures();
    let mut second = start_reader(binary, &dir, &yaml, 2)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while sink.figures().0 < sent && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    queue::wait_empty(client, &url, Duration::from_secs(60)).await?;
    let _ = Command::new("kill").arg("-TERM").arg(second.id().to_string()).status();
    let _ = second.wait();
    queue::delete(client, &url).await;
    let (distinct, duplicates) = sink.figures();
    if distinct < sent {
        return Err(format!("only {distinct} of {sent} messages reached the sink"));
    }
    println!(
        "  {}: sent {sent}, delivered before the kill {at_kill}, duplicates {duplicates}",
        binary.display()
    );
    Ok((sent, duplicates))
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let a = Cli::parse();
    let client = queue::client(&a.endpoint);
    let sink = Sink::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let sink_url = format!("http://{}/", listener.local_addr().map_err(|e| e.to_string())?);
    let app = Router::new().fallback(receive).with_state(sink.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!(
        "rate {} msg/s, SIGKILL after {} s, every {}th delivery takes {} ms",
        a.rate, a.run_seconds, a.slow_every, a.slow_ms
    );
    let mut totals = [Vec::new(), Vec::new()];
    for round in 0..a.rounds {
        println!("round {}", round + 1);
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let binary = if which == 0 { &a.before } else { &a.after };
            let (_, duplicates) = one_run(binary, &a, &client, &sink, &sink_url).await?;
            totals[which].push(duplicates);
        }
    }
    for (label, mut runs) in ["before", "after"].into_iter().zip(totals) {
        runs.sort_unstable();
        println!("{label}: duplicates per SIGKILL {runs:?}, median {}", runs[runs.len() / 2]);
    }
    Ok(())
}
