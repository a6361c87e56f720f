//! The reader's Prometheus metrics (prefix `sluice_reader_`).
//!
//! Why one struct handed around: each stage counts its own events into the same registry, and
//! the names are part of the contract the tests, the benchmark and the operator read, so they are
//! spelled once, here. Sink retries are counted by the sinks themselves (`SinkStats`) and copied
//! in at scrape time, so sinks need not know the metrics library.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::aws::requests::Requests;
use crate::process::batch_metrics::BatchMetrics;
use crate::process::events::Fault;
use crate::process::fetch_stats::FetchStats;
use crate::process::filter_metrics::FilterMetrics;
use crate::process::health::ReaderHealth;
use crate::process::report::Measured;
use crate::process::sink_stats::SinkStats;
use crate::record::Record;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    pub sink: String,
}

/// A message group (`MessageGroupId`) among the few with the most deliveries waiting, or
/// [`OTHER_GROUPS`] for the rest summed: tenants are unbounded, series must not be.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

/// The label under which the groups beyond the top few are summed.
pub const OTHER_GROUPS: &str = "(other)";

/// The queue's name (the last segment of its URL): few per source, so the series stay few, and
/// it is what a person recognises on a dashboard.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

impl QueueLabel {
    pub fn of(queue_url: &str) -> Self {
        Self { queue: queue_name(queue_url).to_owned() }
    }
}

/// The last path segment of a queue URL (the URL itself when it has none): the `queue` label.
pub use sluice_aws::requests::queue_name;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub stage: &'static str,
    pub error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkErrorLabel {
    sink: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CircuitLabel {
    sink: String,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: &'static str,
}

type SinkHistograms = Family<SinkLabel, Histogram, fn() -> Histogram>;
type QueueHistograms = Family<QueueLabel, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    received: Family<QueueLabel, Counter>,
    received_bytes: Family<QueueLabel, Counter>,
    pub delivered: Family<SinkLabel, Counter>,
    delivered_bytes: Family<SinkLabel, Counter>,
    pub deleted: Counter,
    dead_lettered: Family<QueueLabel, Counter>,
    pub released: Counter,
    retries: Family<SinkLabel, Counter>,
    /// Records a sink sent with more message attributes than SQS takes, the rest packed.
    attributes_packed: Family<SinkLabel, Counter>,
    errors: Family<ErrorLabel, Counter>,
    sink_errors: Family<SinkErrorLabel, Counter>,
    empty_receives: Family<QueueLabel, Counter>,
    receive_calls: Family<QueueLabel, Counter>,
    circuit_state: Family<SinkLabel, Gauge>,
    circuit_transitions: Family<CircuitLabel, Counter>,
    pub in_flight: Gauge,
    sink_latency: SinkHistograms,
    receive_lag: QueueHistograms,
    end_to_end: QueueHistograms,
    oldest_age: Family<QueueLabel, FloatGauge>,
    ready: Gauge,
    build_info: Family<BuildLabel, Gauge>,
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
    pub payload: PayloadMetrics,
    /// `spec.filter`: matched, the fates of mismatches, failed evaluations, evaluation time.
    pub filter: FilterMetrics,
    batches: BatchMetrics,
    /// Span batches the OTLP exporter dropped after its retries (see [`Metrics::watch_otlp_export`]).
    otlp_export_failures: Counter,
    /// This reader's health (sinks, fetches, targets) and WARN-line rate limit: what the events
    /// (`process::events`) update beside the counters, one per reader as the registry is.
    pub health: ReaderHealth,
    /// This reader's requests to AWS (`aws::requests`): every client it builds counts here.
    pub requests: Arc<Requests>,
    /// Deliveries waiting for their turn at the sinks, by message group (`deliver::fair`).
    pub fair_waiting: Family<GroupLabel, Gauge>,
    /// The longest such wait under way, seconds, by group (the same few groups).
    pub fair_oldest_wait: Family<GroupLabel, FloatGauge>,
    /// What the reader's report measures as it runs (`process::report`), one per reader too.
    pub report: Measured,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// 10 ms to about 15 days in doublings: a message may wait in SQS up to 14 days.
fn age_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 28))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice_reader");
        let m = Self {
            received: Family::default(),
            received_bytes: Family::default(),
            delivered: Family::default(),
            delivered_bytes: Family::default(),
            deleted: Counter::default(),
            dead_lettered: Family::default(),
            released: Counter::default(),
            retries: Family::default(),
            attributes_packed: Family::default(),
            errors: Family::default(),
            sink_errors: Family::default(),
            empty_receives: Family::default(),
            receive_calls: Family::default(),
            circuit_state: Family::default(),
            circuit_transitions: Family::default(),
            in_flight: Gauge::default(),
            sink_latency: Family::new_with_constructor(latency_histogram),
            receive_lag: Family::new_with_constructor(age_histogram),
            end_to_end: Family::new_with_constructor(age_histogram),
            oldest_age: Family::default(),
            ready: Gauge::default(),
            build_info: Family::default(),
            duplicates: Counter::default(),
            epochs_committed: Counter::default(),
            commit_latency: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            redelivered_committed: Counter::default(),
            sink_stats: Mutex::new(Vec::new()),
            rate_limit_messages: Gauge::default(),
            rate_limit_bytes: Gauge::default(),
            held: HeldMetrics::default(),
            payload: PayloadMetrics::default(),
            filter: FilterMetrics::default(),
            batches: BatchMetrics::default(),
            health: ReaderHealth::default(),
            requests: Arc::default(),
            fair_waiting: Family::default(),
            fair_oldest_wait: Family::default(),
            report: Measured::default(),
            otlp_export_failures: Counter::default(),
            registry: Registry::default(),
        };
        m.build_info.get_or_create(&BuildLabel { version: env!("CARGO_PKG_VERSION") }).set(1);
        m.register(&mut registry);
        m.payload.register(&mut registry);
        m.filter.register(&mut registry);
        m.batches.register(&mut registry);
        Self { registry, ..m }
    }

    /// Count the span exporter's failures (sluice-logs reports them); once per process.
    pub fn watch_otlp_export(&self) {
        let failures = self.otlp_export_failures.clone();
        sluice_logs::on_export_failure(move || {
            failures.inc();
        });
    }

    /// Every metric under its name and help text (the names are the contract; METRICS.md lists
    /// them, and the dashboard and alert rules under deploy/observability query them).
    // long: one registration per family, in one place: the list is the contract METRICS.md documents.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "build_info",
            "Always 1; the version label says which build runs",
            self.build_info.clone(),
        );
        registry.register("ready", "1 while /readyz answers ready, else 0", self.ready.clone());
        registry.register(
            "otlp_export_failures",
            "Span batches dropped because the OTLP collector did not take them after retries",
            self.otlp_export_failures.clone(),
        );
        registry.register(
            "received_messages",
            "Messages received from SQS, per queue",
            self.received.clone(),
        );
        registry.register(
            "received_bytes",
            "Message body bytes received from SQS, per queue",
            self.received_bytes.clone(),
        );
        registry.register("delivered_messages", "Messages acknowledged by a sink", self.delivered.clone());
        registry.register(
            "delivered_bytes",
            "Message body bytes acknowledged by a sink",
            self.delivered_bytes.clone(),
        );
        registry.register("deleted_messages", "Messages deleted from SQS", self.deleted.clone());
        registry.register(
            "aws_requests",
            "Requests sent to AWS, by service, API and queue (retries included)",
            self.requests.family(),
        );
        registry.register(
            "fair_waiting_deliveries",
            "Deliveries waiting for their turn at the sinks by MessageGroupId (spec.delivery.fairness byGroup): the 5 groups with the most, the rest summed under (other)",
            self.fair_waiting.clone(),
        );
        registry.register(
            "fair_oldest_wait_seconds",
            "The longest wait for a turn under way, by the groups of fair_waiting_deliveries",
            self.fair_oldest_wait.clone(),
        );
        registry.register(
            "aws_billed_requests",
            "What AWS bills the answered requests as: SQS bills each 64 KiB chunk of a payload as one request",
            self.requests.billed_family(),
        );
        registry.register(
            "dead_lettered_messages",
            "Messages taken by the dead-letter sink, per source queue",
            self.dead_lettered.clone(),
        );
        registry.register(
            "released_messages",
            "Messages made visible again (not delivered)",
            self.released.clone(),
        );
        registry.register(
            "sink_retries",
            "Delivery attempts beyond the first, per sink",
            self.retries.clone(),
        );
        registry.register(
            "sink_attributes_packed",
            "Records a sink sent with more message attributes than SQS takes, the rest packed into sluice-packed-attributes",
            self.attributes_packed.clone(),
        );
        registry.register("errors", "Errors by pipeline stage and type", self.errors.clone());
        registry.register(
            "sink_errors",
            "Deliveries a sink did not acknowledge, by sink and kind (failed: retried later; rejected: never will be)",
            self.sink_errors.clone(),
        );
        registry.register(
            "empty_receives",
            "ReceiveMessage calls that returned nothing, per queue",
            self.empty_receives.clone(),
        );
        registry.register(
            "receive_calls",
            "ReceiveMessage calls answered by SQS, per queue (with or without messages)",
            self.receive_calls.clone(),
        );
        registry.register(
            "sink_circuit_state",
            "Each sink's circuit breaker: 0 closed, 1 open (receiving paused, held messages wait), 2 half-open (one probe out)",
            self.circuit_state.clone(),
        );
        registry.register(
            "sink_circuit_transitions",
            "Changes of a sink's circuit breaker, by the state it went to",
            self.circuit_transitions.clone(),
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
        registry.register(
            "receive_lag_seconds",
            "Time from SentTimestamp to receipt, per queue",
            self.receive_lag.clone(),
        );
        registry.register(
            "end_to_end_latency_seconds",
            "Time from SentTimestamp to a sink's acknowledgement, per queue",
            self.end_to_end.clone(),
        );
        registry.register(
            "oldest_message_age_seconds",
            "Age of the oldest message in the last receive from the queue (0 after an empty receive)",
            self.oldest_age.clone(),
        );
        registry.register(
            "redelivered_messages",
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

    /// Count one fault in `reader_errors_total{stage,error_type}`.
    pub fn fault(&self, fault: Fault) {
        self.faults(fault, 1);
    }

    /// `count` occurrences of `fault` at once (one per entry of a failed batch call).
    pub fn faults(&self, fault: Fault, count: u64) {
        let (stage, error_type) = fault.labels();
        self.errors.get_or_create(&ErrorLabel { stage, error_type: error_type.into_owned() }).inc_by(count);
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// One received batch of `queue_url`: counts, bytes, and the age of its oldest message
    /// (`sent_ms`: the SentTimestamps known) as the queue's oldest-message age.
    pub fn received(&self, queue_url: &str, messages: u64, bytes: u64, sent_ms: &[i64], now_ms: i64) {
        let label = QueueLabel::of(queue_url);
        self.received.get_or_create(&label).inc_by(messages);
        self.received_bytes.get_or_create(&label).inc_by(bytes);
        let lag = self.receive_lag.get_or_create(&label);
        for &sent in sent_ms {
            lag.observe(age_seconds(sent, now_ms));
        }
        if let Some(&oldest) = sent_ms.iter().min() {
            self.oldest_age.get_or_create(&label).set(age_seconds(oldest, now_ms));
        }
    }

    /// An empty receive: nothing in the queue was waiting for this poller.
    pub fn empty_receive(&self, queue_url: &str) {
        let label = QueueLabel::of(queue_url);
        self.empty_receives.get_or_create(&label).inc();
        self.oldest_age.get_or_create(&label).set(0.0);
    }

    /// One answered ReceiveMessage call on `queue_url`.
    pub fn receive_call(&self, queue_url: &str) {
        self.receive_calls.get_or_create(&QueueLabel::of(queue_url)).inc();
    }

    /// `sink`'s circuit went to `to` (`gauge`: its `sink_circuit_state` value).
    pub fn sink_circuit(&self, sink: &str, gauge: i64, to: &'static str) {
        self.circuit_state.get_or_create(&SinkLabel { sink: sink.to_owned() }).set(gauge);
        self.circuit_transitions.get_or_create(&CircuitLabel { sink: sink.to_owned(), to }).inc();
    }

    /// A record `sink` failed or rejected (`kind`), counted per sink and among the errors.
    pub fn sink_error(&self, sink: &str, kind: &'static str) {
        self.fault(Fault::Delivery(kind));
        self.sink_errors.get_or_create(&SinkErrorLabel { sink: sink.to_owned(), kind }).inc();
    }

    /// Creates `queue_url`'s series at zero, so a dashboard shows the queue and `increase()` sees
    /// the first message, before anything happened to it.
    pub fn declare_queue(&self, queue_url: &str) {
        let label = QueueLabel::of(queue_url);
        drop(self.received.get_or_create(&label));
        drop(self.received_bytes.get_or_create(&label));
        drop(self.empty_receives.get_or_create(&label));
        drop(self.receive_calls.get_or_create(&label));
        drop(self.dead_lettered.get_or_create(&label));
        drop(self.oldest_age.get_or_create(&label));
        drop(self.receive_lag.get_or_create(&label));
        drop(self.end_to_end.get_or_create(&label));
    }

    pub fn delivered(&self, sink: &str, n: u64) {
        self.delivered.get_or_create(&SinkLabel { sink: sink.to_owned() }).inc_by(n);
    }

    /// One record a sink acknowledged: its bytes, and its end-to-end latency from SentTimestamp.
    pub fn delivered_record(&self, sink: &str, record: &Record, now_ms: i64) {
        self.delivered_bytes
            .get_or_create(&SinkLabel { sink: sink.to_owned() })
            .inc_by(record.content_bytes());
        if let Some(sent) = record.sent_timestamp_ms {
            self.end_to_end
                .get_or_create(&QueueLabel::of(&record.queue_url))
                .observe(age_seconds(sent, now_ms));
        }
    }

    pub fn dead_lettered(&self, queue_url: &str) {
        self.dead_lettered.get_or_create(&QueueLabel::of(queue_url)).inc();
    }

    pub fn sink_latency(&self, sink: &str, took: Duration) {
        self.sink_latency.get_or_create(&SinkLabel { sink: sink.to_owned() }).observe(took.as_secs_f64());
    }

    pub fn commit_latency(&self, took: Duration) {
        self.commit_latency.observe(took.as_secs_f64());
    }

    /// Sinks whose own retry counts are exported as `sink_retries_total{sink}`.
    /// Its series are created at zero here, as `declare_queue` does for queues.
    pub fn watch_sink(&self, name: &str, stats: Arc<SinkStats>) {
        let label = SinkLabel { sink: name.to_owned() };
        drop(self.delivered.get_or_create(&label));
        drop(self.delivered_bytes.get_or_create(&label));
        drop(self.retries.get_or_create(&label));
        drop(self.attributes_packed.get_or_create(&label));
        drop(self.sink_latency.get_or_create(&label));
        drop(self.circuit_state.get_or_create(&label));
        for kind in ["failed", "rejected"] {
            drop(self.sink_errors.get_or_create(&SinkErrorLabel { sink: name.to_owned(), kind }));
            drop(self.errors.get_or_create(&ErrorLabel { stage: "deliver", error_type: kind.to_owned() }));
        }
        self.sink_stats.lock().unwrap_or_else(|e| e.into_inner()).push((name.to_owned(), stats));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        for (name, stats) in self.sink_stats.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let counter = self.retries.get_or_create(&SinkLabel { sink: name.clone() });
            counter.inc_by(stats.retries().saturating_sub(counter.get()));
            let packed = self.attributes_packed.get_or_create(&SinkLabel { sink: name.clone() });
            packed.inc_by(stats.packed().saturating_sub(packed.get()));
            self.batches.refresh(name, &stats.batches);
        }
        self.payload.refresh();
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

fn age_seconds(sent_ms: i64, now_ms: i64) -> f64 {
    (now_ms - sent_ms).max(0) as f64 / 1000.0
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

/// Object fetching (S3 notifications, Extended Client pointers), copied from the resolver's
/// `FetchStats` at scrape time as the sinks' retries are, so the fetch path knows no metrics library.
#[derive(Default)]
pub struct PayloadMetrics {
    objects: Counter,
    bytes: Counter,
    held_bytes: Gauge,
    stats: Mutex<Option<Arc<FetchStats>>>,
    object_deletes: Family<OutcomeLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

impl PayloadMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "payload_objects_fetched",
            "Objects fetched from S3 as payloads",
            self.objects.clone(),
        );
        registry.register("payload_fetched_bytes", "Bytes of objects fetched from S3", self.bytes.clone());
        registry.register(
            "payload_held_bytes",
            "Bytes of fetched objects held now (fetched, not yet answered by every sink)",
            self.held_bytes.clone(),
        );
        registry.register(
            "payload_object_deletes",
            "Extended Client objects deleted after their messages (deleted), given up after retries (failed), or left because too many waited (dropped)",
            self.object_deletes.clone(),
        );
    }

    /// `n` Extended Client objects reached `outcome` (`deleted`, `failed`, `dropped`).
    pub fn object_deletes(&self, outcome: &'static str, n: u64) {
        if n > 0 {
            self.object_deletes.get_or_create(&OutcomeLabel { outcome }).inc_by(n);
        }
    }

    /// Export `stats` (the resolver's) from now on.
    pub fn watch(&self, stats: Arc<FetchStats>) {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(stats);
    }

    fn refresh(&self) {
        let Some(stats) = self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return };
        let objects = stats.objects.load(std::sync::atomic::Ordering::Relaxed);
        let bytes = stats.bytes.load(std::sync::atomic::Ordering::Relaxed);
        self.objects.inc_by(objects.saturating_sub(self.objects.get()));
        self.bytes.inc_by(bytes.saturating_sub(self.bytes.get()));
        let held = stats.held_bytes.load(std::sync::atomic::Ordering::Relaxed);
        self.held_bytes.set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        let m = Metrics::new();
        let url = "http://127.0.0.1:4566/queue/us-east-1/000000000000/orders";
        m.received(url, 3, 30, &[1_000, 2_000], 3_500);
        m.empty_receive("http://127.0.0.1:4566/queue/us-east-1/000000000000/idle");
        m.delivered("out", 2);
        m.fault(Fault::ReceiveFailed("QueueDoesNotExist".into()));
        m.in_flight.set(5);
        m.set_ready(true);
        m.sink_latency("out", Duration::from_millis(3));
        m.sink_error("out", "failed");
        m.declare_queue("http://q/declared");
        let stats = Arc::new(SinkStats::default());
        stats.record_retry();
        m.watch_sink("out", stats.clone());
        let text = m.encode();
        for line in [
            "sluice_reader_build_info{version=\"",
            "sluice_reader_ready 1",
            "sluice_reader_received_messages_total{queue=\"orders\"} 3",
            "sluice_reader_received_bytes_total{queue=\"orders\"} 30",
            "sluice_reader_oldest_message_age_seconds{queue=\"orders\"} 2.5",
            "sluice_reader_oldest_message_age_seconds{queue=\"idle\"} 0",
            "sluice_reader_empty_receives_total{queue=\"idle\"} 1",
            "sluice_reader_delivered_messages_total{sink=\"out\"} 2",
            "sluice_reader_errors_total{stage=\"receive\",error_type=\"QueueDoesNotExist\"} 1",
            "sluice_reader_in_flight_messages 5",
            "sluice_reader_sink_errors_total{sink=\"out\",kind=\"failed\"} 1",
            "sluice_reader_sink_errors_total{sink=\"out\",kind=\"rejected\"} 0",
            "sluice_reader_errors_total{stage=\"deliver\",error_type=\"failed\"} 1",
            "sluice_reader_dead_lettered_messages_total{queue=\"declared\"} 0",
            "sluice_reader_delivered_bytes_total{sink=\"out\"} 0",
            "sluice_reader_sink_retries_total{sink=\"out\"} 1",
            "sluice_reader_receive_lag_seconds_sum{queue=\"orders\"} 4.0",
            "sluice_reader_sink_latency_seconds_count{sink=\"out\"} 1",
            "sluice_reader_deleted_messages_total 0",
            "sluice_reader_redelivered_messages_total 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        stats.record_retry();
        assert!(m.encode().contains("sluice_reader_sink_retries_total{sink=\"out\"} 2"));
        assert!(m.encode().contains("sluice_reader_sink_attributes_packed_total{sink=\"out\"} 0"));
        stats.record_packed();
        assert!(m.encode().contains("sluice_reader_sink_attributes_packed_total{sink=\"out\"} 1"));
    }

    #[test]
    fn a_delivered_record_counts_its_bytes_and_end_to_end_latency_by_queue() {
        let m = Metrics::new();
        let record = crate::sink::testing::record("m-1");
        m.delivered_record("out", &record, record.sent_timestamp_ms.unwrap_or(0) + 1_500);
        let text = m.encode();
        let queue = queue_name(&record.queue_url);
        assert!(text.contains("sluice_reader_delivered_bytes_total{sink=\"out\"} 8"), "{text}");
        let latency = format!("sluice_reader_end_to_end_latency_seconds_sum{{queue=\"{queue}\"}} 1.5");
        assert!(text.contains(&latency), "missing {latency} in\n{text}");
    }

    #[test]
    fn the_queue_label_is_the_url_last_segment() {
        assert_eq!(queue_name("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"), "orders.fifo");
        assert_eq!(queue_name("http://q/"), "q");
        assert_eq!(queue_name("orders"), "orders");
    }
}
