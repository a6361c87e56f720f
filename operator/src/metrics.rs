//! The reconciler's Prometheus metrics, registered under the prefix `sluice_operator_`.
//!
//! Why these: the rate of reconciles and of failures by reason says whether the operator is
//! keeping up and what breaks (API conflicts, RBAC, rejected objects); the duration histogram
//! shows a slow API server or a slow AWS endpoint before users notice stale statuses. `leader`
//! tells which replica works (an alert fires when none does); the per-source replica gauges,
//! copied from the status the reconciler writes, let an alert compare ready readers with the
//! Deployment's, so a source whose pods cannot start is seen without `kubectl`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sluice_crds::SqsSourceStatus;

pub use crate::scaler::metrics::SourceLabels;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    reconciles: Counter,
    failures: Family<FailureLabels, Counter>,
    duration: Histogram,
    leader: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    replicas: Family<SourceLabels, Gauge>,
    ready_replicas: Family<SourceLabels, Gauge>,
    otlp_export_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            failures: Family::default(),
            // 5 ms to about 40 s.
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            leader: Gauge::default(),
            build_info: Family::default(),
            replicas: Family::default(),
            ready_replicas: Family::default(),
            otlp_export_failures: Counter::default(),
        }
    }
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let registry = registry.sub_registry_with_prefix("sluice_operator");
        registry.register(
            "reconciles",
            "Reconciles of SqsSources, successful or not",
            metrics.reconciles.clone(),
        );
        for reason in crate::error::Error::METRIC_LABELS {
            drop(metrics.failures.get_or_create(&FailureLabels { reason: reason.to_owned() }));
        }
        registry.register("reconcile_failures", "Failed reconciles by reason", metrics.failures.clone());
        registry.register("reconcile_duration_seconds", "Time one reconcile took", metrics.duration.clone());
        registry.register(
            "leader",
            "1 while this replica leads (reconciles, scales, coordinates checkpoints), else 0",
            metrics.leader.clone(),
        );
        metrics.build_info.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register(
            "build_info",
            "Always 1; the version label says which build runs",
            metrics.build_info.clone(),
        );
        registry.register(
            "source_replicas",
            "Reader pods of the source's Deployment (status.replicas)",
            metrics.replicas.clone(),
        );
        registry.register(
            "source_ready_replicas",
            "Reader pods of the source that are ready (status.readyReplicas)",
            metrics.ready_replicas.clone(),
        );
        registry.register(
            "otlp_export_failures",
            "Span batches dropped because the OTLP collector did not take them after retries",
            metrics.otlp_export_failures.clone(),
        );
        registry.register(
            "aws_requests",
            "Requests sent to AWS for a source, by service and API (retries included)",
            crate::aws_requests::REQUESTS.clone(),
        );
        // How long a changed source waited for its reconcile (the controller's queue delay).
        registry.register(
            "reconcile_wait_seconds",
            "Seconds from a source's spec or metadata write to the start of the reconcile that first sees it",
            crate::reconcile_wait::WAIT.clone(),
        );
        let failures = metrics.otlp_export_failures.clone();
        sluice_logs::on_export_failure(move || {
            failures.inc();
        });
        metrics
    }

    pub fn set_leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Copies the replica counts of the status just computed for `labels`' source.
    pub fn source_status(&self, labels: &SourceLabels, status: &SqsSourceStatus) {
        self.replicas.get_or_create(labels).set(i64::from(status.replicas));
        self.ready_replicas.get_or_create(labels).set(i64::from(status.ready_replicas));
    }

    /// Drops the gauges of a source that is gone.
    pub fn forget(&self, labels: &SourceLabels) {
        self.replicas.remove(labels);
        self.ready_replicas.remove(labels);
    }

    /// Counts one reconcile; `failure` is the error's metric label when it failed.
    pub fn observe(&self, took: Duration, failure: Option<&str>) {
        self.reconciles.inc();
        self.duration.observe(took.as_secs_f64());
        if let Some(reason) = failure {
            self.failures.get_or_create(&FailureLabels { reason: reason.to_owned() }).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exposed_under_their_names() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe(Duration::from_millis(20), None);
        metrics.observe(Duration::from_millis(30), Some("conflict"));
        metrics.set_leading(true);
        let labels = SourceLabels { namespace: "ns".into(), source: "orders".into() };
        let status = SqsSourceStatus { replicas: 3, ready_replicas: 2, ..SqsSourceStatus::default() };
        metrics.source_status(&labels, &status);
        let mut text = String::new();
        let encoded = prometheus_client::encoding::text::encode(&mut text, &registry);
        assert!(encoded.is_ok());
        assert!(text.contains("sluice_operator_reconciles_total 2"), "{text}");
        assert!(text.contains("sluice_operator_reconcile_failures_total{reason=\"conflict\"} 1"), "{text}");
        assert!(text.contains("sluice_operator_reconcile_duration_seconds_count 2"), "{text}");
        assert!(text.contains("sluice_operator_leader 1"), "{text}");
        assert!(text.contains("sluice_operator_build_info{version=\""), "{text}");
        assert!(
            text.contains(r#"sluice_operator_source_ready_replicas{namespace="ns",source="orders"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"sluice_operator_source_replicas{namespace="ns",source="orders"} 3"#),
            "{text}"
        );
        metrics.forget(&labels);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("sluice_operator_source_replicas{"), "{text}");
    }
}
