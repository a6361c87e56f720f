//! The reader's one report, assembled here and written one way: what it holds, how fast it
//! drains, how old the oldest message it received was, how long its messages waited, its AWS
//! requests per message (the lease ConfigMap key `held`, `sluice_crds::HeldReport`), and each
//! sink's health with its circuit and the payload fetches' health (key `sinkHealth`). The
//! operator shows the first in `status.readers` and its autoscaler sizes the fleet with the drain
//! rate and the ages, under either guarantee; the second drives the source's `SinksHealthy`
//! condition. Standalone, the same
//! sink health turns `/readyz` false (`run::start`).
//!
//! Why one value built at start and handed to the writers: the report is written by whichever
//! writer the guarantee uses (the lease renewals under exactlyOnce, the reporter otherwise), both in
//! the cluster layer, which sees neither the pollers nor the sinks. The held figures come from the
//! one [`Held`] the pollers share, the rates, waits and ages from `process::report`, the sinks'
//! health from `process::health` and their circuits from `sink::circuit`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sluice_crds::{HELD_REPORT_KEY, HeldReport, ReaderHeld};

use super::held::{Figures, Held};
use crate::process::events::Fault;
use crate::process::health::{ApiCall, FetchReport, ReaderHealth, SinkReport};
use crate::process::metrics::Metrics;
use crate::process::report::{Rates, Window};
use crate::sink::breaker::State;
use crate::sink::circuit::Circuits;

/// What makes a report worth writing before its refresh: the held messages and the oldest age at
/// receive on a log scale of base 2 (a change by about half or double), the bound in force, and the
/// drain rate, which counts as moved when it changed by [`DRAIN_STEP`] either way
/// ([`Shape::moved_from`]).
///
/// Why the drain rate moves on a finer scale: the autoscaler sizes the fleet on the summed drain
/// rate, and right after a scale event each reader's rate moves by a fraction (8 readers to 6 is a
/// third more work each), not by double; on the base-2 scale such a move waited for the refresh
/// and the scaler decided on rates up to that old. Why a ratio to the rate last written rather
/// than fixed buckets: a rate jittering across a bucket's edge would write at every gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Log to base 2 of one plus the held messages.
    pub held: u64,
    /// The bound on held messages in force.
    pub bound: u64,
    /// The drain rate, thousandths of a message per second.
    pub drain_millis: u64,
    /// Log to base 2 of one plus the oldest age at receive, seconds.
    pub age: u64,
}

/// The factor by which the drain rate must move (up, or down by its inverse) to be worth a write.
pub const DRAIN_STEP: f64 = 1.25;

impl Shape {
    /// Whether this shape differs enough from the one last `written` to write it now. The drain
    /// rates compare as one plus messages per second, so that idle and a trickle of 1 msg/s
    /// stay a finite ratio apart.
    pub fn moved_from(&self, written: &Shape) -> bool {
        let per_second = |millis: u64| 1.0 + millis as f64 / 1000.0;
        let ratio = per_second(self.drain_millis) / per_second(written.drain_millis);
        // A hair under the step, so that an exact quarter counts despite the float rounding.
        let step = DRAIN_STEP - 1e-9;
        (self.held, self.bound, self.age) != (written.held, written.bound, written.age)
            || ratio >= step
            || ratio.recip() >= step
    }
}

/// The reader's report, from the values that know its parts.
pub struct ReaderReport {
    metrics: Arc<Metrics>,
    circuits: Arc<Circuits>,
    held: OnceLock<Arc<Held>>,
    draining: AtomicBool,
}

impl std::fmt::Debug for ReaderReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderReport").finish_non_exhaustive()
    }
}

impl ReaderReport {
    pub fn new(metrics: Arc<Metrics>, circuits: Arc<Circuits>) -> Self {
        Self { metrics, circuits, held: OnceLock::new(), draining: AtomicBool::new(false) }
    }

    /// The reader's health (sinks, fetches, targets) the report is made of.
    pub fn health(&self) -> &ReaderHealth {
        &self.metrics.health
    }

    /// The Kubernetes API took `write`.
    pub fn api_answered(&self, write: ApiCall) {
        self.metrics.health.api_answered(write);
    }

    /// The Kubernetes API did not take `write`: counted under
    /// `reader_errors_total{stage="kubernetes_api"}` and said in `/readyz`'s text.
    pub fn api_failed(&self, write: ApiCall, error: &str) {
        self.metrics.health.api_failed(write, error);
        self.metrics.fault(Fault::ApiCallFailed(write));
    }

    /// Reports follow `held` from now on (the pollers' one, made when they start).
    pub fn register(&self, held: &Arc<Held>) {
        let _ = self.held.set(held.clone());
    }

    /// Each sink's health now, its circuit's state included (open counts as stalled: the
    /// operator's `SinksHealthy` then turns False at the reader's next report, within seconds).
    pub fn sinks(&self) -> BTreeMap<String, SinkReport> {
        let mut report = self.metrics.health.sink_report();
        for (sink, state) in self.circuits.states() {
            if let Some(entry) = report.get_mut(&sink) {
                entry.circuit = state.name();
                entry.stalled |= state != State::Closed;
            }
        }
        report
    }

    /// The payload fetches' health (`None` for a source that fetched nothing): stalled while
    /// messages are held for S3, so an S3 outage of the payload stage shows in the operator's
    /// `SinksHealthy` within seconds, as a sink's open circuit does.
    pub fn fetches(&self) -> Option<FetchReport> {
        self.metrics.health.fetch_report()
    }

    /// Some sink has had no success for `--unready-after-seconds` while deliveries to it fail,
    /// or has its circuit open.
    pub fn sinks_stalled(&self) -> bool {
        self.metrics.health.sinks_stalled() || self.circuits.any_open()
    }

    /// Some sink's circuit is open or half-open.
    pub fn circuit_open(&self) -> bool {
        self.circuits.any_open()
    }

    /// From now on the report says the reader is draining, with drain rate 0: it is leaving,
    /// so the autoscaler must not size the fleet on it.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    fn figures(&self) -> Option<Figures> {
        Some(self.held.get()?.figures())
    }

    /// The held report's [`Shape`] now; `None` before the pollers start.
    pub fn shape(&self) -> Option<Shape> {
        let f = self.figures()?;
        let log = |v: u64| u64::from(v.saturating_add(1).ilog2());
        let measured = &self.metrics.report;
        let age = measured.oldest_age_ms() / 1000;
        Some(Shape {
            held: log(f.messages as u64),
            bound: f.bound.messages as u64,
            drain_millis: measured.rates().drain,
            age: log(age),
        })
    }

    /// The held report of `pod` now, taking the wait window; `None` before the pollers start.
    pub fn held(&self, pod: &str, now_ms: i64) -> Option<HeldReport> {
        let f = self.figures()?;
        let measured = &self.metrics.report;
        let mut report = encode(pod, now_ms, f, measured.rates(), measured.take());
        if self.draining.load(Ordering::Relaxed) {
            report.reader.draining = true;
            report.reader.drain_millis_per_second = 0;
        }
        Some(report)
    }

    /// The lease ConfigMap data entry of the held report for `pod` now, taking the wait window;
    /// `None` before the pollers start.
    pub fn held_entry(&self, pod: &str, now_ms: i64) -> Option<(String, String)> {
        let report = self.held(pod, now_ms)?;
        Some((HELD_REPORT_KEY.to_owned(), serde_json::to_string(&report).ok()?))
    }
}

fn encode(pod: &str, now_ms: i64, f: Figures, rates: Rates, w: Window) -> HeldReport {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let waited = w.count > 0;
    HeldReport {
        reported_at_ms: now_ms,
        reader: ReaderHeld {
            pod: pod.to_owned(),
            held_messages: f.messages as u64,
            held_bytes: f.bytes,
            bound_messages: f.bound.messages as u64,
            bound_bytes: f.bound.bytes,
            handed_off: w.count,
            wait_mean_milliseconds: waited.then(|| millis(w.sum) / w.count),
            wait_max_milliseconds: waited.then(|| millis(w.max)),
            drain_millis_per_second: rates.drain,
            aws_requests_per_thousand_messages: rates.cost,
            oldest_age_milliseconds: w.oldest_age_ms,
            delivery_wait_p50_milliseconds: w.delivery_wait.quantile(0.5),
            delivery_wait_p99_milliseconds: w.delivery_wait.quantile(0.99),
            draining: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::held::Bound;
    use super::*;

    fn rate(per_second: f64) -> Shape {
        Shape { held: 3, bound: 40, drain_millis: (per_second * 1000.0) as u64, age: 0 }
    }

    #[test]
    fn the_drain_rate_moves_with_a_quarter_and_not_with_jitter() {
        let written = rate(99.0);
        assert!(rate(124.0).moved_from(&written), "a quarter up");
        assert!(rate(79.0).moved_from(&written), "a quarter down (the inverse of 1.25)");
        assert!(rate(4.0 * 99.0).moved_from(&written), "8 readers to 2 at a steady total");
        for jitter in [90.0, 95.0, 99.5, 105.0, 110.0, 118.0] {
            assert!(!rate(jitter).moved_from(&written), "{jitter} msg/s is jitter around 99");
        }
        assert!(rate(0.25).moved_from(&rate(0.0)), "a trickle after idle");
        assert!(!rate(0.2).moved_from(&rate(0.0)), "less than a quarter of a message per second");
        let fuller = Shape { held: 4, ..written };
        assert!(fuller.moved_from(&written), "held doubled");
    }

    #[test]
    fn the_report_carries_the_figures_and_the_windows_mean_and_max() {
        let bound = Bound { messages: 40, bytes: 1 << 20 };
        let f = Figures { messages: 12, bytes: 1_200, bound, settled: 7 };
        let mut w = Window {
            count: 4,
            sum: Duration::from_millis(1_000),
            max: Duration::from_millis(700),
            oldest_age_ms: Some(4_000),
            ..Window::default()
        };
        w.delivery_wait.add(8, 3);
        w.delivery_wait.add(12, 1);
        let json =
            serde_json::to_value(encode("orders-reader-a", 9, f, Rates { drain: 2_500, cost: Some(204) }, w))
                .expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "reportedAtMs": 9, "pod": "orders-reader-a", "heldMessages": 12, "heldBytes": 1_200,
                "boundMessages": 40, "boundBytes": 1_048_576, "handedOff": 4,
                "waitMeanMilliseconds": 250, "waitMaxMilliseconds": 700,
                "drainMillisPerSecond": 2_500, "awsRequestsPerThousandMessages": 204,
                "oldestAgeMilliseconds": 4_000,
                "deliveryWaitP50Milliseconds": 8, "deliveryWaitP99Milliseconds": 12,
            })
        );
        let idle = serde_json::to_value(encode("a", 9, f, Rates { drain: 0, cost: None }, Window::default()))
            .expect("json");
        assert!(idle.get("waitMeanMilliseconds").is_none(), "no hand-off, no wait: {idle}");
        assert!(idle.get("oldestAgeMilliseconds").is_none(), "no receive, no age: {idle}");
        assert!(idle.get("awsRequestsPerThousandMessages").is_none(), "none delivered: {idle}");
    }
}
