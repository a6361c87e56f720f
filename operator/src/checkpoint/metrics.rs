//! The checkpoint coordinator's state as Prometheus metrics, one series per exactlyOnce source.
//!
//! Why these: a growing gap between the open and the committed epoch, a barrier histogram whose
//! mass moves right, or fences that keep counting say that exactly-once delivery is stalling (and
//! deletes with it) before the backlog shows it. Gauges of a source that is gone (deleted, or no
//! longer exactlyOnce) are removed so dashboards do not show ghosts; the histogram and the counter
//! stay, being cumulative, as the scaler's counters do.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use sluice_protocol::coordinator::Action;

pub use crate::scaler::metrics::SourceLabels;

use super::plan::Plan;

/// Upper bounds of the barrier histogram, in seconds: from a barrier that completes within one
/// coordinator tick (0.5 s) to one stalled for ten minutes behind a slow or stuck reader.
const BARRIER_BUCKETS: [f64; 12] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

fn barrier_histogram() -> Histogram {
    Histogram::new(BARRIER_BUCKETS)
}

/// Registered under the prefix `sluice_operator_checkpoint_`.
#[derive(Clone)]
pub struct Metrics {
    open_epoch: Family<SourceLabels, Gauge>,
    committed_epoch: Family<SourceLabels, Gauge>,
    fenced_readers: Family<SourceLabels, Gauge>,
    live_readers: Family<SourceLabels, Gauge>,
    barrier_seconds: Family<SourceLabels, Histogram, fn() -> Histogram>,
    fences: Family<SourceLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            open_epoch: Family::default(),
            committed_epoch: Family::default(),
            fenced_readers: Family::default(),
            live_readers: Family::default(),
            barrier_seconds: Family::new_with_constructor(barrier_histogram),
            fences: Family::default(),
        }
    }
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let r = registry.sub_registry_with_prefix("sluice_operator_checkpoint");
        r.register("open_epoch", "The checkpoint epoch currently open", metrics.open_epoch.clone());
        r.register(
            "committed_epoch",
            "The last checkpoint epoch every live reader acknowledged",
            metrics.committed_epoch.clone(),
        );
        r.register(
            "fenced_readers",
            "Readers excluded from checkpoints because their lease ran out, until they rejoin",
            metrics.fenced_readers.clone(),
        );
        r.register(
            "live_readers",
            "Readers whose acks checkpoint commits wait for",
            metrics.live_readers.clone(),
        );
        r.register(
            "barrier_seconds",
            "Time from an epoch's close (the next epoch's opening) to its commit",
            metrics.barrier_seconds.clone(),
        );
        r.register(
            "fences",
            "Readers fenced (lease ran out or pod restarted); their uncommitted epochs are aborted",
            metrics.fences.clone(),
        );
        metrics
    }

    /// Records one interval whose checkpoint (if it changed) was written.
    pub fn observe(&self, labels: &SourceLabels, plan: &Plan) {
        let status = &plan.status;
        self.open_epoch.get_or_create(labels).set(gauge_value(status.current_epoch));
        self.committed_epoch.get_or_create(labels).set(gauge_value(status.committed_epoch));
        self.fenced_readers.get_or_create(labels).set(gauge_value(status.fenced_readers.len() as u64));
        self.live_readers.get_or_create(labels).set(gauge_value(status.live_readers as u64));
        for &(_, ms) in &plan.barriers {
            self.barrier_seconds.get_or_create(labels).observe(ms as f64 / 1000.0);
        }
        let fences = plan.actions.iter().filter(|a| matches!(a, Action::Fence { .. })).count();
        if fences > 0 {
            self.fences.get_or_create(labels).inc_by(fences as u64);
        }
    }

    /// Drops the gauges of a source that is gone (the histogram and counter stay: cumulative).
    pub fn forget(&self, labels: &SourceLabels) {
        for family in [&self.open_epoch, &self.committed_epoch, &self.fenced_readers, &self.live_readers] {
            family.remove(labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use sluice_protocol::Incarnation;

    use super::*;
    use crate::checkpoint::plan::CheckpointStatus;

    fn plan_with(barriers: Vec<(u64, u64)>, actions: Vec<Action>) -> Plan {
        Plan {
            write: None,
            actions,
            barriers,
            status: CheckpointStatus {
                current_epoch: 9,
                committed_epoch: 7,
                fenced_readers: vec!["r-b".into()],
                live_readers: 3,
                last_barrier_ms: Some(1_500),
                healthy: true,
                reason: "EpochsCommitting",
                message: String::new(),
            },
        }
    }

    #[test]
    fn state_barriers_and_fences_are_exported_and_gauges_forgotten() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let labels = SourceLabels { namespace: "ns".into(), source: "orders".into() };
        let fence = Action::Fence { pod: "r-b".into(), incarnation: Incarnation(2), committed_through: 7 };
        metrics.observe(&labels, &plan_with(vec![(7, 1_500)], vec![fence]));
        metrics.observe(&labels, &plan_with(vec![(8, 700_000)], Vec::new()));

        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"sluice_operator_checkpoint_open_epoch{namespace="ns",source="orders"} 9"#,
            r#"sluice_operator_checkpoint_committed_epoch{namespace="ns",source="orders"} 7"#,
            r#"sluice_operator_checkpoint_fenced_readers{namespace="ns",source="orders"} 1"#,
            r#"sluice_operator_checkpoint_live_readers{namespace="ns",source="orders"} 3"#,
            r#"sluice_operator_checkpoint_barrier_seconds_count{namespace="ns",source="orders"} 2"#,
            r#"sluice_operator_checkpoint_barrier_seconds_sum{namespace="ns",source="orders"} 701.5"#,
            r#"sluice_operator_checkpoint_barrier_seconds_bucket{le="0.1",namespace="ns",source="orders"} 0"#,
            r#"sluice_operator_checkpoint_barrier_seconds_bucket{le="2.5",namespace="ns",source="orders"} 1"#,
            r#"sluice_operator_checkpoint_barrier_seconds_bucket{le="600.0",namespace="ns",source="orders"} 1"#,
            r#"sluice_operator_checkpoint_barrier_seconds_bucket{le="+Inf",namespace="ns",source="orders"} 2"#,
            r#"sluice_operator_checkpoint_fences_total{namespace="ns",source="orders"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }

        metrics.forget(&labels);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for gone in ["open_epoch{", "committed_epoch{", "fenced_readers{", "live_readers{"] {
            assert!(!text.contains(&format!("sluice_operator_checkpoint_{gone}")), "{gone} left in\n{text}");
        }
        assert!(text.contains("sluice_operator_checkpoint_fences_total{"), "{text}");
        assert!(text.contains("sluice_operator_checkpoint_barrier_seconds_count{"), "{text}");
    }
}
