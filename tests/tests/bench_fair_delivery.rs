//! Benchmark, ignored by default (BENCHMARKS.md, "Fair delivery by message group"): two tenants
//! on one standard queue, marked by `MessageGroupId` as SQS fair queues mark them, one sending 20
//! times as much as the other, into an http sink slower than both together. The quiet tenant's
//! delivery latency (from its send to the sink seeing it) is printed side by side with
//! `spec.delivery.fairness` `byGroup` and `arrival`; nothing is asserted about the figures.
//!
//! Run: `cargo test -p sluice-tests --test bench_fair_delivery -- --ignored --nocapture`.
//!
//! The reader takes work 30 s ahead (`held.horizonMilliseconds`), so what waits, waits in the
//! reader for the sink's four slots rather than in SQS: there the order is the reader's to choose.
//! (LocalStack does not prioritise a quiet tenant's receives as SQS fair queues do, so the SQS
//! side of fairness is not measured here.)

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Result, ensure};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::standalone::Reader;

/// Rounds of sending, one every `ROUND`: `NOISY` messages of the noisy tenant, `QUIET` of the
/// quiet one, interleaved as they would arrive.
const ROUNDS: usize = 12;
const ROUND: Duration = Duration::from_millis(500);
const NOISY: usize = 40;
const QUIET: usize = 2;
/// The sink answers each event after this long, four at a time: 40 msg/s, under the 84 msg/s sent.
const SINK_LATENCY: Duration = Duration::from_millis(100);
const SINK_CONCURRENCY: u32 = 4;
const WITHIN: Duration = Duration::from_secs(120);

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// `tenant;sent-at-ms;seq`.
fn body(tenant: &str, seq: usize) -> String {
    format!("{tenant};{};{seq}", now_ms())
}

async fn send_round(queue: &TestQueue, round: usize) -> Result<()> {
    let mut bodies: Vec<(&str, String)> = Vec::new();
    for i in 0..NOISY {
        bodies.push(("noisy", body("noisy", round * NOISY + i)));
        // The quiet tenant's messages land among the noisy ones, not after all of them.
        if i % (NOISY / QUIET) == 0 {
            bodies.push(("quiet", body("quiet", round * QUIET + i / (NOISY / QUIET))));
        }
    }
    for chunk in bodies.chunks(10) {
        let mut request = queue.client().send_message_batch().queue_url(&queue.url);
        for (i, (tenant, body)) in chunk.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body)
                .message_group_id(*tenant)
                .build()?;
            request = request.entries(entry);
        }
        let sent = request.send().await?;
        ensure!(
            sent.failed().is_empty(),
            "SendMessageBatch with MessageGroupId on a standard queue: {:?}",
            sent.failed()
        );
    }
    Ok(())
}

/// Latencies in ms per tenant: from the send time in the body to when the sink was seen to have
/// the event (polled every 5 ms).
async fn run(fairness: &str, endpoint: &str) -> Result<HashMap<String, Vec<u128>>> {
    let client = sqs_client(endpoint);
    let options = QueueOptions { visibility_timeout: Some(120), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, &format!("fair-{fairness}"), false, &options).await?;
    let sink = SinkServer::start_with_latency("127.0.0.1:0", SINK_LATENCY).await?;
    let yaml = SourceYaml::bare("fair", &queue.url, endpoint)
        .visibility_timeout(120)
        .held_max_messages(2000)
        .held_horizon_ms(30_000)
        .fairness(fairness)
        .sink("webhook", Sink::http(&sink.url()).concurrency(SINK_CONCURRENCY).timeout_ms(10_000))
        .yaml();
    let dir = tempfile::tempdir()?;
    let reader = Reader::start(dir.path(), &yaml)?;
    let total = ROUNDS * (NOISY + QUIET);
    let sending = async {
        for round in 0..ROUNDS {
            let started = Instant::now();
            send_round(&queue, round).await?;
            tokio::time::sleep(ROUND.saturating_sub(started.elapsed())).await;
        }
        anyhow::Ok(())
    };
    let watching = async {
        let mut latencies: HashMap<String, Vec<u128>> = HashMap::new();
        let (mut seen, started) = (0, Instant::now());
        while seen < total {
            ensure!(started.elapsed() < WITHIN, "only {seen} of {total} delivered: {}", reader.log());
            let events = sink.events_from(seen);
            let at = now_ms();
            for event in &events {
                let text = String::from_utf8_lossy(&event.body);
                let mut parts = text.split(';');
                if let (Some(tenant), Some(sent)) =
                    (parts.next(), parts.next().and_then(|s| s.parse::<u128>().ok()))
                {
                    latencies.entry(tenant.to_owned()).or_default().push(at.saturating_sub(sent));
                }
            }
            seen += events.len();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        anyhow::Ok(latencies)
    };
    let (sent, latencies) = tokio::join!(sending, watching);
    sent?;
    drop(reader);
    sink.stop().await?;
    queue.delete().await?;
    latencies
}

fn percentile(values: &mut [u128], p: f64) -> u128 {
    values.sort_unstable();
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len().max(1));
    values.get(rank - 1).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it with --ignored and read what it prints"]
async fn quiet_tenant_latency_with_and_without_fairness() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    println!(
        "two tenants on one standard queue: {NOISY} vs {QUIET} messages every {ROUND:?} for {ROUNDS} rounds \
         ({} msg/s), http sink {SINK_LATENCY:?} a request x {SINK_CONCURRENCY} at once ({} msg/s)",
        (NOISY + QUIET) as f64 / ROUND.as_secs_f64(),
        f64::from(SINK_CONCURRENCY) / SINK_LATENCY.as_secs_f64()
    );
    let mut rows = Vec::new();
    for fairness in ["byGroup", "arrival"] {
        let mut latencies = run(fairness, &endpoint).await?;
        for tenant in ["quiet", "noisy"] {
            let values = latencies.entry(tenant.to_owned()).or_default();
            let (n, p50, p99) = (values.len(), percentile(values, 0.5), percentile(values, 0.99));
            let max = values.iter().max().copied().unwrap_or(0);
            rows.push(format!(
                "{fairness:>8} {tenant:>6}: {n:4} messages, p50 {p50:6} ms, p99 {p99:6} ms, max {max:6} ms"
            ));
        }
    }
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
