//! The scaler's inputs and outputs as Prometheus gauges, one series per source.
//!
//! Why inputs too: "why did it scale to 7?" is answered by plotting backlog, drain rate and the
//! recommendation beside the desired count, without reading logs. Series of a deleted source are
//! removed so dashboards do not show ghosts.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sluice_crds::QueueFigures;

use super::decision::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub namespace: String,
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    namespace: String,
    source: String,
    reason: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Registered under the prefix `sluice_operator_scaler_`.
#[derive(Clone, Default)]
pub struct Metrics {
    visible: Family<SourceLabels, Gauge>,
    in_flight: Family<SourceLabels, Gauge>,
    delayed: Family<SourceLabels, Gauge>,
    backlog: Family<SourceLabels, Gauge>,
    drain_per_replica: Family<SourceLabels, FloatGauge>,
    current: Family<SourceLabels, Gauge>,
    recommended: Family<SourceLabels, Gauge>,
    desired: Family<SourceLabels, Gauge>,
    changes: Family<ChangeLabels, Counter>,
    poll_errors: Family<SourceLabels, Counter>,
    queue_read_errors: Family<SourceLabels, Counter>,
    message_age: Family<SourceLabels, FloatGauge>,
    arrival: Family<SourceLabels, FloatGauge>,
    suspended: Family<SourceLabels, Gauge>,
    read_failures_in_a_row: Family<SourceLabels, Gauge>,
    fallback_applied: Family<SourceLabels, Gauge>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let r = registry.sub_registry_with_prefix("sluice_operator_scaler");
        r.register(
            "queue_visible_messages",
            "ApproximateNumberOfMessages, summed over the source's queues",
            metrics.visible.clone(),
        );
        r.register(
            "queue_in_flight_messages",
            "ApproximateNumberOfMessagesNotVisible, summed",
            metrics.in_flight.clone(),
        );
        r.register(
            "queue_delayed_messages",
            "ApproximateNumberOfMessagesDelayed, summed",
            metrics.delayed.clone(),
        );
        r.register(
            "backlog_messages",
            "Messages counted toward scaling (per countInFlight, countDelayed)",
            metrics.backlog.clone(),
        );
        r.register(
            "drain_per_replica_messages_per_second",
            "Mean delete rate of busy readers, from their leases (0: none reported)",
            metrics.drain_per_replica.clone(),
        );
        r.register(
            "current_replicas",
            "The reader Deployment's spec.replicas before the decision",
            metrics.current.clone(),
        );
        r.register(
            "recommended_replicas",
            "This interval's recommendation, before stabilization and step limit",
            metrics.recommended.clone(),
        );
        r.register("desired_replicas", "Replicas the scaler decided", metrics.desired.clone());
        r.register(
            "scale_changes",
            "Decisions that changed replicas, by Event reason",
            metrics.changes.clone(),
        );
        r.register(
            "poll_errors",
            "Intervals without a decision because an input could not be read",
            metrics.poll_errors.clone(),
        );
        r.register(
            "queue_read_errors",
            "Intervals in which the queue attributes (GetQueueAttributes) could not be read",
            metrics.queue_read_errors.clone(),
        );
        r.register(
            "message_age_seconds",
            "The larger of the oldest message age at receive and the p99 delivery wait the readers reported (0: none)",
            metrics.message_age.clone(),
        );
        r.register(
            "arrival_messages_per_second",
            "Estimated arrival rate: the readers' summed drain plus the backlog's growth over the last 60 s",
            metrics.arrival.clone(),
        );
        r.register("suspended", "1 while spec.suspend holds the readers at 0", metrics.suspended.clone());
        r.register(
            "queue_read_failures_in_a_row",
            "Queue reads (GetQueueAttributes) that failed in a row; 0 once one succeeds",
            metrics.read_failures_in_a_row.clone(),
        );
        r.register(
            "fallback_applied",
            "1 while spec.scaling.fallback sets the replicas because the queue cannot be read",
            metrics.fallback_applied.clone(),
        );
        metrics
    }

    /// The age the readers reported, as the latency target compares it.
    pub fn age(&self, labels: &SourceLabels, age_seconds: Option<f64>) {
        self.message_age.get_or_create(labels).set(age_seconds.unwrap_or(0.0));
    }

    /// Whether the source is suspended; set after every interval.
    pub fn suspended(&self, labels: &SourceLabels, suspended: bool) {
        self.suspended.get_or_create(labels).set(i64::from(suspended));
    }

    /// Records one decision and its inputs.
    pub fn observe(
        &self,
        labels: &SourceLabels,
        figures: &QueueFigures,
        drain: Option<f64>,
        current: i32,
        decision: &Decision,
    ) {
        self.visible.get_or_create(labels).set(figures.visible);
        self.in_flight.get_or_create(labels).set(figures.in_flight);
        self.delayed.get_or_create(labels).set(figures.delayed);
        self.backlog.get_or_create(labels).set(decision.backlog);
        self.drain_per_replica.get_or_create(labels).set(drain.unwrap_or(0.0));
        self.current.get_or_create(labels).set(i64::from(current));
        self.recommended.get_or_create(labels).set(i64::from(decision.recommended));
        self.desired.get_or_create(labels).set(i64::from(decision.desired));
        self.arrival.get_or_create(labels).set(decision.arrival_per_second);
        if let Some(reason) = decision.reason.event_reason() {
            let labels = ChangeLabels {
                namespace: labels.namespace.clone(),
                source: labels.source.clone(),
                reason: reason.to_owned(),
            };
            self.changes.get_or_create(&labels).inc();
        }
    }

    /// Counts an interval whose queue read failed. Called after every interval, so the series
    /// exists (at 0) from a source's first poll and an alert on its increase sees it start.
    pub fn queue_read(&self, labels: &SourceLabels, failed: bool) {
        let counter = self.queue_read_errors.get_or_create(labels);
        if failed {
            counter.inc();
        }
    }

    /// Where the scaler stands with its queue reads: failures in a row, and whether the fallback
    /// applies.
    pub fn sight(&self, labels: &SourceLabels, failures_in_a_row: u32, fallback_applied: bool) {
        self.read_failures_in_a_row.get_or_create(labels).set(i64::from(failures_in_a_row));
        self.fallback_applied.get_or_create(labels).set(i64::from(fallback_applied));
    }

    pub fn poll_failed(&self, labels: &SourceLabels) {
        self.poll_errors.get_or_create(labels).inc();
    }

    /// Drops the gauges of a source that no longer exists (counters stay: they are cumulative).
    pub fn forget(&self, labels: &SourceLabels) {
        for family in [
            &self.visible,
            &self.in_flight,
            &self.delayed,
            &self.backlog,
            &self.current,
            &self.recommended,
            &self.desired,
            &self.suspended,
            &self.read_failures_in_a_row,
            &self.fallback_applied,
        ] {
            family.remove(labels);
        }
        self.drain_per_replica.remove(labels);
        self.message_age.remove(labels);
        self.arrival.remove(labels);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use prometheus_client::encoding::text::encode;
    use sluice_crds::ScalingSpec;

    use super::*;
    use crate::scaler::decision::{Observation, decide};
    use crate::scaler::history::History;

    #[test]
    fn inputs_and_outputs_are_exported_and_forgotten() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let labels = SourceLabels { namespace: "ns".into(), source: "orders".into() };
        let figures = QueueFigures { visible: 900, in_flight: 100, delayed: 4, observed_at: None };
        let seen = Observation {
            figures: figures.clone(),
            current: 2,
            drain_per_replica: Some(2.5),
            fleet_drain: 5.0,
            age_seconds: None,
            rate_limit: None,
            now: Timestamp::UNIX_EPOCH,
        };
        let decision = decide(&ScalingSpec::default(), &seen, History::default());
        metrics.observe(&labels, &figures, Some(2.5), 2, &decision);

        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"sluice_operator_scaler_queue_visible_messages{namespace="ns",source="orders"} 900"#,
            r#"sluice_operator_scaler_backlog_messages{namespace="ns",source="orders"} 1000"#,
            r#"sluice_operator_scaler_drain_per_replica_messages_per_second{namespace="ns",source="orders"} 2.5"#,
            r#"sluice_operator_scaler_current_replicas{namespace="ns",source="orders"} 2"#,
            r#"sluice_operator_scaler_desired_replicas{namespace="ns",source="orders"} 10"#,
            r#"sluice_operator_scaler_scale_changes_total{namespace="ns",source="orders",reason="ScaledUp"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }

        metrics.forget(&labels);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(!text.contains("sluice_operator_scaler_desired_replicas{"), "{text}");
        assert!(text.contains("sluice_operator_scaler_scale_changes_total{"), "{text}");
    }
}
