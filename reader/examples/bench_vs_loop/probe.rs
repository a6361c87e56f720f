//! What one SQS call really costs through the harness: sequential ListQueues, timed at the caller,
//! direct to the backend and through a latency proxy.
//!
//! Why: the ceiling `pollers x 10 / RTT` assumes a call costs the RTT alone. Whatever the harness
//! adds (the proxy's timer, its task hops, the backend, the machine's load) shows up here, for
//! every consumer alike, so each result is printed beside the round trip probed just before it.

use std::time::{Duration, Instant};

use crate::{queue, rtt};

/// Call times of one probe, milliseconds.
pub struct Probe {
    pub median_ms: f64,
    pub mean_ms: f64,
    pub p90_ms: f64,
}

impl Probe {
    fn of(mut took: Vec<f64>) -> Self {
        took.sort_by(f64::total_cmp);
        let at = |q: f64| took[((q * took.len() as f64).ceil() as usize).clamp(1, took.len()) - 1];
        let mean_ms = took.iter().sum::<f64>() / took.len() as f64;
        Self { median_ms: at(0.5), mean_ms, p90_ms: at(0.9) }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "median {:.2} ms, mean {:.2} ms, p90 {:.2} ms", self.median_ms, self.mean_ms, self.p90_ms)
    }
}

/// `calls` sequential ListQueues on `client` (at least one).
pub async fn calls(client: &aws_sdk_sqs::Client, calls: usize) -> Result<Probe, String> {
    let mut took = Vec::new();
    for _ in 0..calls.max(1) {
        let started = Instant::now();
        client
            .list_queues()
            .queue_name_prefix("bench-probe-none")
            .send()
            .await
            .map_err(|e| format!("ListQueues: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(Probe::of(took))
}

/// `calls` sequential calls through a fresh proxy (as `runtimes` says) adding `rtt` in front of
/// `endpoint` (after one unmeasured call, which opens the connection).
pub async fn through_proxy(
    runtimes: &crate::runtimes::Runtimes,
    endpoint: &str,
    rtt: Duration,
    count: usize,
) -> Result<Probe, String> {
    let proxy = rtt::proxy(runtimes, endpoint, rtt, None)?;
    let client = queue::client(&proxy.url());
    calls(&client, 1).await?;
    calls(&client, count).await
}

/// The one-minute load average, for the line beside a figure.
pub fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
