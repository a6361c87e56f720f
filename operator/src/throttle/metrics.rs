//! Metrics of the API server's throttling, under the prefix `sluice_operator_`.
//!
//! Why these: the counter of throttled answers says that API priority and fairness pushes back on
//! the operator and how hard; the seconds waited say what it cost (reconciles, scaling and epochs
//! came that much later); the gauge is what an alert fires on while an episode lasts.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Default)]
pub struct ThrottleMetrics {
    pub responses: Counter,
    pub waited_seconds: Counter<f64, AtomicU64>,
    pub throttled: Gauge,
}

impl ThrottleMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let registry = registry.sub_registry_with_prefix("sluice_operator");
        registry.register(
            "api_throttled_responses",
            "Kubernetes API answers of 429 Too Many Requests (API priority and fairness); each is retried after its Retry-After",
            metrics.responses.clone(),
        );
        registry.register(
            "api_throttled_wait_seconds",
            "Seconds the operator's API requests waited before retrying a 429, summed over requests",
            metrics.waited_seconds.clone(),
        );
        registry.register(
            "api_throttled",
            "1 while the Kubernetes API server throttles this operator (until 10 s after the last retry of a 429), else 0",
            metrics.throttled.clone(),
        );
        metrics
    }
}
