//! Counters a sink keeps about itself, for the pipeline's metrics to read.
//!
//! Why in `process` and not in `sink`: the metrics read them, and the shared bottom imports no
//! stage; so the type sits below both.
//!
//! Why plain atomics and not metrics types: the sinks should not know which metrics library the
//! reader exports with, nor its label names. The pipeline reads these after each `deliver` (or at
//! scrape time) and feeds its own `sink_retries_total{sink}`; a sink only counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::process::batch_stats::BatchStats;

#[derive(Debug, Default)]
pub struct SinkStats {
    retries: AtomicU64,
    requests: AtomicU64,
    request_micros: AtomicU64,
    packed: AtomicU64,
    /// Batch requests, their sizes and failed events (http sinks with `http.batch` only).
    pub batches: BatchStats,
}

impl SinkStats {
    /// One more attempt beyond the first for some record or batch.
    pub fn record_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// One request to the downstream system finished (any result) after `took`.
    pub fn record_request(&self, took: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.request_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// One record sent with more message attributes than the target takes, the rest packed.
    pub fn record_packed(&self) {
        self.packed.fetch_add(1, Ordering::Relaxed);
    }

    /// Records sent with packed attributes since the sink was built (monotonic).
    pub fn packed(&self) -> u64 {
        self.packed.load(Ordering::Relaxed)
    }

    /// Retries since the sink was built (monotonic, like a Prometheus counter).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Requests sent since the sink was built, retries included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Sum of the request latencies since the sink was built.
    pub fn request_time(&self) -> Duration {
        Duration::from_micros(self.request_micros.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_accumulate() {
        let stats = SinkStats::default();
        stats.record_retry();
        stats.record_retry();
        stats.record_request(Duration::from_millis(3));
        stats.record_request(Duration::from_millis(4));
        stats.record_packed();
        assert_eq!(stats.packed(), 1);
        assert_eq!(stats.retries(), 2);
        assert_eq!(stats.requests(), 2);
        assert_eq!(stats.request_time(), Duration::from_millis(7));
    }
}
