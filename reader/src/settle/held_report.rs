//! The reader's one report, in its lease ConfigMap (key `held`, `sluice_crds::HeldReport`): what
//! it holds, how fast it drains, how old the oldest message it received was and how long its
//! messages waited. The operator shows it in `status.readers`, and its autoscaler sizes the fleet
//! with the drain rate and the ages, under either guarantee.
//!
//! Why process-wide, as the sink health is: the report is written by whichever writer the
//! guarantee uses (the lease renewals under exactlyOnce, the reporter otherwise), and both are in
//! the cluster layer, which sees neither the pollers nor the metrics. The held figures are read from
//! the one [`Held`] the pollers share, the drain rate from the heartbeat (through the gate); the
//! waits and ages are kept as a window that each written report takes and starts afresh, so that it
//! covers the last report interval.
//!
//! Two waits: from the receive to the hand-off to the sinks (the reader's own wait, mostly the rate
//! limit's), and the delivery wait, from the message's SentTimestamp to that hand-off (the queue's
//! wait plus the reader's, what a latency target is about).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_crds::{HELD_REPORT_KEY, HeldReport, ReaderHeld};

use super::held::Held;
use super::wait_quantiles::Quantiles;

/// Waits and ages since the last report.
#[derive(Clone, Default)]
struct Window {
    count: u64,
    sum: Duration,
    max: Duration,
    /// The oldest message's age at receive, milliseconds.
    oldest_age_ms: Option<u64>,
    delivery_wait: Quantiles,
}

static HELD: Mutex<Option<Arc<Held>>> = Mutex::new(None);
static WAIT: Mutex<Option<Window>> = Mutex::new(None);
static DRAIN: AtomicU64 = AtomicU64::new(0);
/// AWS requests per 1,000 delivered messages over the heartbeat's cost window; `u64::MAX`: none
/// delivered in it.
static COST: AtomicU64 = AtomicU64::new(u64::MAX);

fn window<T>(f: impl FnOnce(&mut Window) -> T) -> T {
    f(WAIT.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Window::default))
}

/// The heartbeat's drain rate, in thousandths of a message per second.
pub fn drained(drain_millis_per_second: u64) {
    DRAIN.store(drain_millis_per_second, Ordering::Relaxed);
}

/// The heartbeat's requests per delivered message over its cost window (`None`: nothing was
/// delivered in it).
pub fn cost(requests_per_message: Option<f64>) {
    let per_thousand = requests_per_message.map_or(u64::MAX, |r| (r * 1000.0).round() as u64);
    COST.store(per_thousand, Ordering::Relaxed);
}

fn cost_per_thousand() -> Option<u64> {
    Some(COST.load(Ordering::Relaxed)).filter(|c| *c != u64::MAX)
}

/// A batch was received at `now_ms`, its messages sent at `sent_ms` (the SentTimestamps known).
pub fn received(sent_ms: &[i64], now_ms: i64) {
    let Some(&oldest) = sent_ms.iter().min() else { return };
    let age = u64::try_from(now_ms.saturating_sub(oldest)).unwrap_or(0);
    window(|w| w.oldest_age_ms = Some(w.oldest_age_ms.map_or(age, |a| a.max(age))));
}

/// Reports follow `held` from now on.
pub fn register(held: &Arc<Held>) {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
}

/// Messages sent at `sent_ms` (`None`: SentTimestamp unknown) waited `waited` from their receive
/// to their hand-off to the sinks, which is now.
pub fn waited(sent_ms: impl IntoIterator<Item = Option<i64>>, waited: Duration) {
    let now = sluice_protocol::now_ms();
    window(|w| {
        for sent in sent_ms {
            w.count += 1;
            w.sum += waited;
            if let Some(sent) = sent {
                w.delivery_wait.add(u64::try_from(now.saturating_sub(sent)).unwrap_or(0), 1);
            }
        }
        w.max = w.max.max(waited);
    });
}

fn figures() -> Option<super::held::Figures> {
    Some(HELD.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.figures())
}

/// What makes a report worth writing before its refresh, each on a log scale (a change by about
/// half or double): the held messages, the drain rate and the oldest age at receive; and the bound
/// in force. `None` before the pollers start.
pub type Shape = [u64; 4];

/// The report's [`Shape`] now; `None` before the pollers start.
pub fn shape() -> Option<Shape> {
    let f = figures()?;
    let log = |v: u64| u64::from(v.saturating_add(1).ilog2());
    let age = window(|w| w.oldest_age_ms.unwrap_or(0)) / 1000;
    Some([
        log(f.messages as u64),
        f.bound.messages as u64,
        log(DRAIN.load(Ordering::Relaxed) / 1000),
        log(age),
    ])
}

/// The report of `pod` now, taking the wait window; `None` before the pollers start.
pub fn report(pod: &str, now_ms: i64) -> Option<HeldReport> {
    let f = figures()?;
    let w = WAIT.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
    let rates = Rates { drain: DRAIN.load(Ordering::Relaxed), cost: cost_per_thousand() };
    Some(encode(pod, now_ms, f, rates, w))
}

/// The two rates the heartbeat measures: the drain rate (thousandths of a message per second)
/// and the AWS requests per 1,000 delivered messages.
#[derive(Clone, Copy)]
struct Rates {
    drain: u64,
    cost: Option<u64>,
}

fn encode(pod: &str, now_ms: i64, f: super::held::Figures, rates: Rates, w: Window) -> HeldReport {
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
        },
    }
}

/// The lease ConfigMap data entry for `pod` now, taking the wait window; `None` before the
/// pollers start.
pub fn entry(pod: &str, now_ms: i64) -> Option<(String, String)> {
    let report = report(pod, now_ms)?;
    Some((HELD_REPORT_KEY.to_owned(), serde_json::to_string(&report).ok()?))
}

#[cfg(test)]
mod tests {
    use super::super::held::{Bound, Figures};
    use super::*;

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
