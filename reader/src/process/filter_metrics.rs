//! The metrics of `spec.filter` (prefix `sluice_reader_filter_`): what it matched, what became of
//! the rest, how often the expression failed, and what an evaluation costs.
//!
//! Why counted per batch: the poller judges a received batch at once, so the label lookups are
//! paid once a batch, not once a message.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::metrics::{QueueLabel, queue_name};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    queue: String,
    /// `matched`, the fate of a mismatch (`deleted`, `released`, `routed`), or `failed`: the
    /// expression failed on it and it took the dead-letter route (`onError: deadLetter`).
    outcome: &'static str,
}

/// What one batch's judging came to.
#[derive(Default)]
pub struct FilterCounts {
    pub matched: u64,
    pub deleted: u64,
    pub released: u64,
    pub routed: u64,
    /// Failed evaluations sent to the dead-letter route (`onError: deadLetter`).
    pub failed: u64,
    /// Evaluations that failed (also counted in their fate).
    pub errors: u64,
    /// How long each evaluation took.
    pub evaluated: Vec<Duration>,
}

pub struct FilterMetrics {
    messages: Family<OutcomeLabel, Counter>,
    errors: Family<QueueLabel, Counter>,
    evaluation: Histogram,
}

impl Default for FilterMetrics {
    fn default() -> Self {
        Self {
            messages: Family::default(),
            errors: Family::default(),
            // 1 µs to about 33 ms in doublings.
            evaluation: Histogram::new(exponential_buckets(0.000_001, 2.0, 16)),
        }
    }
}

impl FilterMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "filter_messages",
            "Messages judged by spec.filter, per queue: matched, the fate of a mismatch (deleted, released, routed), or failed (the expression failed on it: the dead-letter route)",
            self.messages.clone(),
        );
        registry.register(
            "filter_errors",
            "Messages on which spec.filter.expression failed (a missing key, a wrong type): dead-lettered, or taken as a mismatch with onError: mismatch",
            self.errors.clone(),
        );
        registry.register(
            "filter_evaluation_seconds",
            "Time to evaluate spec.filter.expression on one message, variables included",
            self.evaluation.clone(),
        );
    }

    /// Add one batch's counts for the queue at `queue_url`.
    pub fn count(&self, queue_url: &str, counts: &FilterCounts) {
        let queue = queue_name(queue_url);
        let outcomes = [
            ("matched", counts.matched),
            ("deleted", counts.deleted),
            ("released", counts.released),
            ("routed", counts.routed),
            ("failed", counts.failed),
        ];
        for (outcome, n) in outcomes {
            if n > 0 {
                self.messages.get_or_create(&OutcomeLabel { queue: queue.to_owned(), outcome }).inc_by(n);
            }
        }
        if counts.errors > 0 {
            self.errors.get_or_create(&QueueLabel { queue: queue.to_owned() }).inc_by(counts.errors);
        }
        for took in &counts.evaluated {
            self.evaluation.observe(took.as_secs_f64());
        }
    }

    /// Series at zero for `queue_url`, so dashboards and rates see the filter from the start.
    pub fn declare(&self, queue_url: &str) {
        let queue = queue_name(queue_url);
        for outcome in ["matched", "deleted", "released", "routed", "failed"] {
            let _ = self.messages.get_or_create(&OutcomeLabel { queue: queue.to_owned(), outcome });
        }
        let _ = self.errors.get_or_create(&QueueLabel { queue: queue.to_owned() });
    }
}
