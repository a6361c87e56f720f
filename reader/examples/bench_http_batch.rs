//! Benchmark: the `http` sink in binary mode (one POST per message) against batch mode
//! (`http.batch`, one POST of `application/cloudevents-batch+json` per batch), delivering to the
//! same loopback receiver: messages/s and the sink side's CPU per message, side by side. Not a
//! test; run it with
//!
//! ```sh
//! cargo build --workspace --all-targets
//! target/debug/examples/bench_http_batch                       # 20000 messages, 3 rounds
//! target/debug/examples/bench_http_batch --messages 50000 --rounds 5
//! cargo build --release --example bench_http_batch   # the release figures in BENCHMARKS.md
//! target/release/examples/bench_http_batch --messages 200000 --rounds 3
//! ```
//!
//! The sinks are the reader's own (`HttpSink`, `HttpBatchSink`), driven as the reader drives
//! them: 32 "pollers" each hand the sink receive batches of 10 records and wait for their
//! outcomes, so up to 320 records are in flight. The receiver (axum) runs on a thread of its own,
//! answers 200 with an empty body, and counts events (parsing each batch's JSON array); its CPU
//! is subtracted from the process's, so the CPU column is the sink side's alone (user + system,
//! from /proc). Modes run interleaved, round after round; the table shows each mode's median.
//! The machines are shared: compare the rows of one run, not figures across runs.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::HeaderMap;
use bytes::Bytes;
use clap::Parser;
use sluice_crds::{HttpBatchSpec, HttpSinkSpec, RetrySpec};
use sluice_reader::record::{Payload, Record};
use sluice_reader::sink::http::HttpSink;
use sluice_reader::sink::http_batch::HttpBatchSink;
use sluice_reader::sink::retry::RetryPolicy;
use sluice_reader::sink::{Outcome, Sink};

#[derive(Parser)]
struct Args {
    /// Messages per mode and round.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Rounds (each runs every mode once); the table shows medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent deliveries of 10 records, as pollers with receive batches of 10.
    #[arg(long, default_value_t = 32)]
    pollers: usize,
}

/// Events the receiver counted.
static EVENTS: AtomicU64 = AtomicU64::new(0);

async fn receive(headers: HeaderMap, body: Bytes) -> &'static str {
    let batch = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/cloudevents-batch"));
    let events = if batch {
        serde_json::from_slice::<Vec<serde_json::Value>>(&body).map_or(0, |events| events.len() as u64)
    } else {
        1
    };
    EVENTS.fetch_add(events, Ordering::Relaxed);
    ""
}

/// Starts the receiver on a thread of its own; its URL and its thread's /proc stat path.
fn start_receiver() -> (String, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async move {
            let stat = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let url = format!("http://{}/events", listener.local_addr().expect("addr"));
            tx.send((url, format!("/proc/{}/stat", stat.display()))).expect("send");
            let app = Router::new().route("/events", axum::routing::post(receive)).with_state(());
            let _ = axum::serve(listener, app).await;
        });
    });
    rx.recv().expect("the receiver's address")
}

/// utime + stime of a /proc stat file, in seconds (clock ticks of 10 ms).
fn cpu_seconds(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    let after_name = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) at index 0.
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    ticks as f64 / 100.0
}

fn record(i: usize) -> Arc<Record> {
    Arc::new(Record {
        message_id: format!("{i:08x}-4a1e-4c2b-9a77-bench"),
        queue_url: Arc::from("http://127.0.0.1:4566/queue/us-east-1/000000000000/bench"),
        body: Bytes::from(format!(
            r#"{{"seq":{i},"order":"A-{i}","amount":12.5,"note":"a small JSON message"}}"#
        )),
        payload: Payload::Raw,
        attributes: Default::default(),
        message_attributes: Default::default(),
        attribute_types: Default::default(),
        sent_timestamp_ms: Some(1_700_000_000_000),
        receive_count: 1,
        group_id: None,
        dedup_id: None,
        epoch: 0,
        incarnation: 0,
        trace: None,
        object: None,
    })
}

#[derive(Clone, Copy)]
enum Mode {
    Binary,
    Batch(u32),
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Binary => "binary (one POST per message)".into(),
            Mode::Batch(n) => format!("batch, maxEvents {n}"),
        }
    }

    fn sink(self, url: &str) -> Arc<dyn Sink> {
        let spec = serde_json::json!({"url": url, "timeoutMs": 10_000, "concurrency": 32});
        let spec: HttpSinkSpec = serde_json::from_value(spec).expect("an http sink spec");
        let http =
            HttpSink::new("bench", &spec, RetryPolicy::from_spec(&RetrySpec::default())).expect("sink");
        match self {
            Mode::Binary => Arc::new(http),
            Mode::Batch(max_events) => {
                let batch = HttpBatchSpec { max_events, ..HttpBatchSpec::default() };
                Arc::new(HttpBatchSink::new(http, &batch).expect("batch sink"))
            }
        }
    }
}

/// One run's figures.
#[derive(Clone, Copy)]
struct Figures {
    rate: f64,
    /// CPU µs per message of the sink side, and of the receiver.
    cpu: f64,
    receiver_cpu: f64,
    requests: u64,
}

async fn run(mode: Mode, url: &str, receiver_stat: &str, args: &Args) -> Figures {
    let sink = mode.sink(url);
    let records: Arc<Vec<Arc<Record>>> = Arc::new((0..args.messages).map(record).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let (cpu_before, receiver_before) = (cpu_seconds("/proc/self/stat"), cpu_seconds(receiver_stat));
    let started = Instant::now();
    let pollers = (0..args.pollers).map(|_| {
        let (sink, records, next) = (sink.clone(), records.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let from = next.fetch_add(10, Ordering::Relaxed);
                if from >= records.len() {
                    return;
                }
                let chunk = &records[from..(from + 10).min(records.len())];
                let outcomes = sink.deliver(chunk).await;
                assert!(outcomes.iter().all(|o| *o == Outcome::Delivered), "{outcomes:?}");
            }
        })
    });
    for poller in pollers.collect::<Vec<_>>() {
        poller.await.expect("poller");
    }
    let took = started.elapsed().as_secs_f64();
    let receiver = cpu_seconds(receiver_stat) - receiver_before;
    let cpu = cpu_seconds("/proc/self/stat") - cpu_before - receiver;
    let requests = sink.stats().map_or(0, |s| s.requests());
    let per_message = |seconds: f64| seconds * 1e6 / args.messages as f64;
    Figures {
        rate: args.messages as f64 / took,
        cpu: per_message(cpu),
        receiver_cpu: per_message(receiver),
        requests,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let (url, receiver_stat) = start_receiver();
    let modes = [Mode::Binary, Mode::Batch(10), Mode::Batch(100)];
    let mut results: Vec<Vec<Figures>> = vec![Vec::new(); modes.len()];
    for round in 1..=args.rounds {
        for (m, mode) in modes.iter().enumerate() {
            let before = EVENTS.load(Ordering::Relaxed);
            let f = run(*mode, &url, &receiver_stat, &args).await;
            let events = EVENTS.load(Ordering::Relaxed) - before;
            assert_eq!(events, args.messages as u64, "the receiver counted every event once");
            eprintln!(
                "round {round}: {}: {:.0} msg/s, {:.1} µs sink CPU/msg, {:.1} µs receiver CPU/msg, {} requests",
                mode.name(),
                f.rate,
                f.cpu,
                f.receiver_cpu,
                f.requests
            );
            results[m].push(f);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let medians = |runs: &[Figures], pick: fn(&Figures) -> f64| median(runs.iter().map(pick).collect());
    let (binary_rate, binary_cpu) = (medians(&results[0], |f| f.rate), medians(&results[0], |f| f.cpu));
    println!(
        "{} messages per run, {} pollers x 10, medians of {} rounds",
        args.messages, args.pollers, args.rounds
    );
    println!(
        "| mode | requests | messages/s | x binary | sink CPU µs/message | x binary | receiver CPU µs/message |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (mode, runs) in modes.iter().zip(&results) {
        let (rate, cpu) = (medians(runs, |f| f.rate), medians(runs, |f| f.cpu));
        println!(
            "| {} | {} | {rate:.0} | {:.2} | {cpu:.1} | {:.2} | {:.1} |",
            mode.name(),
            runs[0].requests,
            rate / binary_rate,
            cpu / binary_cpu,
            medians(runs, |f| f.receiver_cpu),
        );
    }
}
