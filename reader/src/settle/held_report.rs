//! What this reader holds and how long its messages wait, for the report in its lease ConfigMap
//! (key `held`, `sluice_crds::HeldReport`), which the operator shows in `status.readers`.
//!
//! Why process-wide, as the sink health is: the report is written by whichever writer the
//! guarantee uses (the lease renewals under exactlyOnce, the reporter otherwise), and both are in
//! the cluster layer, which sees neither the pollers nor the metrics. The held figures are read from
//! the one [`Held`] the pollers share; the wait is kept as a window (count, sum, max) that each
//! written report takes and starts afresh, so that it covers the last report interval.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_crds::{HELD_REPORT_KEY, HeldReport, ReaderHeld};

use super::held::Held;

/// Waits since the last report.
#[derive(Clone, Copy, Default)]
struct Window {
    count: u64,
    sum: Duration,
    max: Duration,
}

static HELD: Mutex<Option<Arc<Held>>> = Mutex::new(None);
static WAIT: Mutex<Window> = Mutex::new(Window { count: 0, sum: Duration::ZERO, max: Duration::ZERO });

/// Reports follow `held` from now on.
pub fn register(held: &Arc<Held>) {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
}

/// `messages` messages waited `waited` from their receive to their hand-off to the sinks.
pub fn waited(messages: usize, waited: Duration) {
    if messages == 0 {
        return;
    }
    let mut w = WAIT.lock().unwrap_or_else(|e| e.into_inner());
    w.count += messages as u64;
    w.sum += waited * u32::try_from(messages).unwrap_or(u32::MAX);
    w.max = w.max.max(waited);
}

fn figures() -> Option<super::held::Figures> {
    Some(HELD.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.figures())
}

/// What makes a report worth writing before its refresh: the held messages on a log scale (a
/// change by about half or double) and the bound in force. `None` before the pollers start.
pub fn shape() -> Option<(u32, usize)> {
    let f = figures()?;
    Some(((f.messages + 1).ilog2(), f.bound.messages))
}

/// The report of `pod` now, taking the wait window; `None` before the pollers start.
pub fn report(pod: &str, now_ms: i64) -> Option<HeldReport> {
    let f = figures()?;
    let w = std::mem::take(&mut *WAIT.lock().unwrap_or_else(|e| e.into_inner()));
    Some(encode(pod, now_ms, f, w))
}

fn encode(pod: &str, now_ms: i64, f: super::held::Figures, w: Window) -> HeldReport {
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
        let w = Window { count: 4, sum: Duration::from_millis(1_000), max: Duration::from_millis(700) };
        let json = serde_json::to_value(encode("orders-reader-a", 9, f, w)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "reportedAtMs": 9, "pod": "orders-reader-a", "heldMessages": 12, "heldBytes": 1_200,
                "boundMessages": 40, "boundBytes": 1_048_576, "handedOff": 4,
                "waitMeanMilliseconds": 250, "waitMaxMilliseconds": 700,
            })
        );
        let idle = serde_json::to_value(encode("a", 9, f, Window::default())).expect("json");
        assert!(idle.get("waitMeanMilliseconds").is_none(), "no hand-off, no wait: {idle}");
    }
}
