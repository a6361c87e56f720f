//! The reconciler's Prometheus metrics, registered under the prefix `sluice_operator_`.
//!
//! Why these three: the rate of reconciles and of failures by reason says whether the operator is
//! keeping up and what breaks (API conflicts, RBAC, rejected objects); the duration histogram
//! shows a slow API server or a slow AWS endpoint before users notice stale statuses.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: String,
}

#[derive(Clone)]
pub struct Metrics {
    reconciles: Counter,
    failures: Family<FailureLabels, Counter>,
    duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            failures: Family::default(),
            // 5 ms to about 40 s.
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
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
        registry.register("reconcile_failures", "Failed reconciles by reason", metrics.failures.clone());
        registry.register("reconcile_duration_seconds", "Time one reconcile took", metrics.duration.clone());
        metrics
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
        let mut text = String::new();
        let encoded = prometheus_client::encoding::text::encode(&mut text, &registry);
        assert!(encoded.is_ok());
        assert!(text.contains("sluice_operator_reconciles_total 2"), "{text}");
        assert!(text.contains("sluice_operator_reconcile_failures_total{reason=\"conflict\"} 1"), "{text}");
        assert!(text.contains("sluice_operator_reconcile_duration_seconds_count 2"), "{text}");
    }
}
