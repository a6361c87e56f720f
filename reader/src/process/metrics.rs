//! The reader's Prometheus metrics (prefix `sluice_reader_`).
//!
//! Why one struct handed around: each stage counts its own events into the same registry, and
//! the names are part of the contract the tests, the benchmark and the operator read, so they are
//! spelled once, here. Sink retries are counted by the sinks themselves (`SinkStats`) and copied
//! in at scrape time, so sinks need not know the metrics library.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::sink::SinkStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub stage: &'static str,
    pub error_type: String,
}

type HistogramFamily = Family<SinkLabel, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    pub received: Counter,
    pub delivered: Family<SinkLabel, Counter>,
    pub deleted: Counter,
    pub dead_lettered: Counter,
    pub released: Counter,
    retries: Family<SinkLabel, Counter>,
    errors: Family<ErrorLabel, Counter>,
    pub empty_receives: Counter,
    pub in_flight: Gauge,
    sink_latency: HistogramFamily,
    lag: Histogram,
    pub duplicates: Counter,
    /// Exactly-once: own epochs whose deletes are done, the time from an epoch's pre-commit (it
    /// closed and every message was settled) to its deletes confirmed, and redelivered messages
    /// deleted without delivery because an epoch had already committed them.
    pub epochs_committed: Counter,
    commit_latency: Histogram,
    pub redelivered_committed: Counter,
    sink_stats: Mutex<Vec<(String, Arc<SinkStats>)>>,
    /// This replica's share of the source-wide rate limit (0: no limit); set by `intake::limiter::publish`.
    pub rate_limit_messages: Gauge,
    pub rate_limit_bytes: Gauge,
    pub held: HeldMetrics,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice_reader");
        let m = Self {
            received: Counter::default(),
            delivered: Family::default(),
            deleted: Counter::default(),
            dead_lettered: Counter::default(),
            released: Counter::default(),
            retries: Family::default(),
            errors: Family::default(),
            empty_receives: Counter::default(),
            in_flight: Gauge::default(),
            sink_latency: Family::new_with_constructor(latency_histogram),
            lag: Histogram::new(exponential_buckets(0.01, 2.0, 18)),
            duplicates: Counter::default(),
            epochs_committed: Counter::default(),
            commit_latency: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            redelivered_committed: Counter::default(),
            sink_stats: Mutex::new(Vec::new()),
            rate_limit_messages: Gauge::default(),
            rate_limit_bytes: Gauge::default(),
            held: HeldMetrics::default(),
            registry: Registry::default(),
        };
        m.register(&mut registry);
        Self { registry, ..m }
    }

    /// Every metric under its name and help text (the names are the contract).
    fn register(&self, registry: &mut Registry) {
        registry.register("received_messages", "Messages received from SQS", self.received.clone());
        registry.register("delivered_messages", "Messages acknowledged by a sink", self.delivered.clone());
        registry.register("deleted_messages", "Messages deleted from SQS", self.deleted.clone());
        registry.register(
            "dead_lettered_messages",
            "Messages taken by the dead-letter sink",
            self.dead_lettered.clone(),
        );
        registry.register(
            "released_messages",
            "Messages made visible again (not delivered)",
            self.released.clone(),
        );
        registry.register("retries", "Delivery attempts beyond the first, per sink", self.retries.clone());
        registry.register("errors", "Errors by pipeline stage and type", self.errors.clone());
        registry.register(
            "empty_receives",
            "ReceiveMessage calls that returned nothing",
            self.empty_receives.clone(),
        );
        registry.register(
            "in_flight_messages",
            "Messages received and not yet deleted or released",
            self.in_flight.clone(),
        );
        registry.register(
            "sink_latency_seconds",
            "Time a sink took to answer a delivery",
            self.sink_latency.clone(),
        );
        registry.register("lag_seconds", "Time from SentTimestamp to receipt", self.lag.clone());
        registry.register(
            "duplicates",
            "Messages received again by this reader (redeliveries)",
            self.duplicates.clone(),
        );
        registry.register(
            "rate_limit_messages_per_second",
            "This replica's share of the source-wide messages/s limit (0: no limit)",
            self.rate_limit_messages.clone(),
        );
        registry.register(
            "rate_limit_bytes_per_second",
            "This replica's share of the source-wide bytes/s limit (0: no limit)",
            self.rate_limit_bytes.clone(),
        );
        registry.register(
            "epochs_committed",
            "Own checkpoint epochs committed and deleted",
            self.epochs_committed.clone(),
        );
        registry.register(
            "commit_latency_seconds",
            "Exactly-once: from an epoch's pre-commit to its deletes confirmed",
            self.commit_latency.clone(),
        );
        registry.register(
            "redelivered_committed_messages",
            "Redelivered messages deleted without delivery: an epoch had committed them",
            self.redelivered_committed.clone(),
        );
        self.held.register(registry);
    }

    pub fn error(&self, stage: &'static str, error_type: impl Into<String>) {
        self.errors.get_or_create(&ErrorLabel { stage, error_type: error_type.into() }).inc();
    }

    pub fn delivered(&self, sink: &str, n: u64) {
        self.delivered.get_or_create(&SinkLabel { sink: sink.to_owned() }).inc_by(n);
    }

    pub fn sink_latency(&self, sink: &str, took: Duration) {
        self.sink_latency.get_or_create(&SinkLabel { sink: sink.to_owned() }).observe(took.as_secs_f64());
    }

    pub fn commit_latency(&self, took: Duration) {
        self.commit_latency.observe(took.as_secs_f64());
    }

    pub fn lag(&self, sent_timestamp_ms: i64, now_ms: i64) {
        self.lag.observe((now_ms - sent_timestamp_ms).max(0) as f64 / 1000.0);
    }

    /// Sinks whose own retry counts are exported as `retries_total{sink}`.
    pub fn watch_sink(&self, name: &str, stats: Arc<SinkStats>) {
        self.sink_stats.lock().unwrap_or_else(|e| e.into_inner()).push((name.to_owned(), stats));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        for (name, stats) in self.sink_stats.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let counter = self.retries.get_or_create(&SinkLabel { sink: name.clone() });
            counter.inc_by(stats.retries().saturating_sub(counter.get()));
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What a reader holds (received, not yet settled) against its bound, and how long messages wait
/// between their receive and their hand-off to the sinks (the rate limit's wait included).
pub struct HeldMetrics {
    pub messages: Gauge,
    pub bytes: Gauge,
    pub bound_messages: Gauge,
    pub bound_bytes: Gauge,
    wait: Histogram,
}

impl Default for HeldMetrics {
    fn default() -> Self {
        Self {
            messages: Gauge::default(),
            bytes: Gauge::default(),
            bound_messages: Gauge::default(),
            bound_bytes: Gauge::default(),
            wait: latency_histogram(),
        }
    }
}

impl HeldMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("held_messages", "Messages received and not yet settled", self.messages.clone());
        registry.register("held_bytes", "Body bytes of the messages held", self.bytes.clone());
        registry.register(
            "held_bound_messages",
            "Most messages this reader takes in now (pollers wait above it)",
            self.bound_messages.clone(),
        );
        registry.register(
            "held_bound_bytes",
            "Most body bytes this reader takes in now (pollers wait above it)",
            self.bound_bytes.clone(),
        );
        registry.register(
            "delivery_wait_seconds",
            "Time from a message's receive to its hand-off to the sinks",
            self.wait.clone(),
        );
    }

    /// `messages` messages waited `waited` between their receive and their hand-off.
    pub fn waited(&self, messages: usize, waited: Duration) {
        for _ in 0..messages {
            self.wait.observe(waited.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        let m = Metrics::new();
        m.received.inc_by(3);
        m.delivered("out", 2);
        m.error("receive", "QueueDoesNotExist");
        m.in_flight.set(5);
        m.sink_latency("out", Duration::from_millis(3));
        m.lag(1_000, 3_500);
        let stats = Arc::new(SinkStats::default());
        stats.record_retry();
        m.watch_sink("out", stats.clone());
        let text = m.encode();
        for line in [
            "sluice_reader_received_messages_total 3",
            "sluice_reader_delivered_messages_total{sink=\"out\"} 2",
            "sluice_reader_errors_total{stage=\"receive\",error_type=\"QueueDoesNotExist\"} 1",
            "sluice_reader_in_flight_messages 5",
            "sluice_reader_retries_total{sink=\"out\"} 1",
            "sluice_reader_lag_seconds_sum 2.5",
            "sluice_reader_sink_latency_seconds_count{sink=\"out\"} 1",
            "sluice_reader_deleted_messages_total 0",
            "sluice_reader_duplicates_total 0",
            "sluice_reader_empty_receives_total 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        stats.record_retry();
        assert!(m.encode().contains("sluice_reader_retries_total{sink=\"out\"} 2"));
    }
}
