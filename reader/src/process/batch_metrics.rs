//! The batch metrics of batching HTTP sinks (`http.batch`), copied from their `BatchStats` at
//! scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::process::batch_stats::{BatchStats, ItemFailure};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabel {
    sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabel {
    sink: String,
    class: &'static str,
}

/// 1, 2, 5, 10, 20, 50, 100: the sizes a user sets `maxEvents` to.
fn events_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0])
}

pub struct BatchMetrics {
    requests: Family<SinkLabel, Counter>,
    events: Family<SinkLabel, Histogram, fn() -> Histogram>,
    failed: Family<FailedLabel, Counter>,
}

impl Default for BatchMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            events: Family::new_with_constructor(events_histogram),
            failed: Family::default(),
        }
    }
}

impl BatchMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "sink_batch_requests",
            "Batch requests an http sink with http.batch sent (retries included)",
            self.requests.clone(),
        );
        registry.register("sink_batch_events", "Events per batch request, per sink", self.events.clone());
        registry.register(
            "sink_batch_failed_items",
            "Events of a batch request not delivered, by class (receiver: named in batchItemFailures; batch_rejected: 4xx for the batch; batch_failed: 5xx, 408, 429 or no answer; bad_answer: an answer that could not be read)",
            self.failed.clone(),
        );
    }

    /// Copy `stats` of sink `name` in. Series appear with the sink's first batch, so a sink
    /// without `http.batch` has none.
    pub fn refresh(&self, name: &str, stats: &BatchStats) {
        if stats.requests() == 0 {
            return;
        }
        let label = SinkLabel { sink: name.to_owned() };
        let requests = self.requests.get_or_create(&label);
        requests.inc_by(stats.requests().saturating_sub(requests.get()));
        let histogram = self.events.get_or_create(&label);
        for (size, batches) in stats.take_sizes() {
            for _ in 0..batches {
                histogram.observe(size as f64);
            }
        }
        for class in ItemFailure::ALL {
            let counter =
                self.failed.get_or_create(&FailedLabel { sink: name.to_owned(), class: class.label() });
            counter.inc_by(stats.failed(class).saturating_sub(counter.get()));
        }
    }
}
