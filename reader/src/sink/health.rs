//! Whether deliveries are getting through, per sink: the last success, the failures since and the
//! last error.
//!
//! Why: a sink that refuses everything must turn the reader not ready, so that the fault shows
//! where people look (`/readyz`, the Deployment's ready count), and must reach the source's status
//! (`SinksHealthy`), not only counters. "Stalled" means a delivery to a sink failed and none to it
//! has succeeded for the configured time since the later of its last success and the first failure
//! after it: an idle reader (no work) is never stalled. Per sink, because one working sink must not
//! hide another that fails every message.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::breaker::State;

/// One sink's record.
#[derive(Default)]
struct SinkHealth {
    /// Wall clock of the last success, milliseconds since the epoch.
    last_success_ms: Option<i64>,
    /// The first failure since the last success, if any.
    failing_since: Option<Instant>,
    failures_since_success: u64,
    last_error: Option<String>,
}

/// What a reader reports about one sink (the `sinkHealth` key of its lease ConfigMap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkReport {
    pub last_success_ms: Option<i64>,
    /// Failures since the last success (0: healthy).
    pub failures_since: u64,
    /// The latest failure, one line; absent once a delivery succeeds.
    pub last_error: Option<String>,
    /// No success for the reader's `--unready-after-seconds` while deliveries fail, or the
    /// sink's circuit is open (`sink::circuit`): receiving is paused for it.
    pub stalled: bool,
    /// The sink's circuit breaker: `closed`, `open` or `half_open`.
    pub circuit: &'static str,
}

#[derive(Default)]
pub struct Health {
    sinks: BTreeMap<String, SinkHealth>,
}

impl Health {
    pub fn delivered(&mut self, sink: &str, now_ms: i64) {
        let health = self.sinks.entry(sink.to_owned()).or_default();
        *health = SinkHealth { last_success_ms: Some(now_ms), ..SinkHealth::default() };
    }

    pub fn failed(&mut self, sink: &str, now: Instant, reason: &str) {
        let health = self.sinks.entry(sink.to_owned()).or_default();
        health.failing_since.get_or_insert(now);
        health.failures_since_success += 1;
        health.last_error = Some(one_line(reason));
    }

    /// Some sink has had no success for `after` while deliveries to it fail.
    pub fn stalled(&self, now: Instant, after: Duration) -> bool {
        self.sinks.values().any(|h| is_stalled(h, now, after))
    }

    /// Every sink that was ever tried, by name.
    pub fn report(&self, now: Instant, after: Duration) -> BTreeMap<String, SinkReport> {
        let report = |h: &SinkHealth| SinkReport {
            last_success_ms: h.last_success_ms,
            failures_since: h.failures_since_success,
            last_error: h.last_error.clone(),
            stalled: is_stalled(h, now, after),
            circuit: State::Closed.name(),
        };
        self.sinks.iter().map(|(name, h)| (name.clone(), report(h))).collect()
    }
}

fn is_stalled(health: &SinkHealth, now: Instant, after: Duration) -> bool {
    health.failing_since.is_some_and(|since| now.duration_since(since) >= after)
}

/// At most one line of at most 300 characters: the error a status message can carry.
fn one_line(reason: &str) -> String {
    let line = reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(300) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

static HEALTH: LazyLock<Mutex<Health>> = LazyLock::new(Mutex::default);

fn health() -> std::sync::MutexGuard<'static, Health> {
    HEALTH.lock().unwrap_or_else(|e| e.into_inner())
}

/// `sink` acknowledged a delivery.
pub fn delivered(sink: &str) {
    health().delivered(sink, sluice_protocol::now_ms());
}

/// A delivery to `sink` failed or was refused for `reason`.
pub fn failed(sink: &str, reason: &str) {
    health().failed(sink, Instant::now(), reason);
}

/// How long a sink may fail without a success before it counts as stalled (the reader's
/// `--unready-after-seconds`); set once at start.
static UNREADY_AFTER: Mutex<Duration> = Mutex::new(Duration::from_secs(60));

/// Sets the time [`stalled`] and [`report`] count against.
pub fn set_unready_after(after: Duration) {
    *UNREADY_AFTER.lock().unwrap_or_else(|e| e.into_inner()) = after;
}

pub(crate) fn unready_after() -> Duration {
    *UNREADY_AFTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Some sink has had no success for the configured time while deliveries to it fail, or has
/// its circuit open.
pub fn stalled() -> bool {
    health().stalled(Instant::now(), unready_after()) || super::circuit::any_open()
}

/// Each sink's health now, its circuit's state included (open counts as stalled: the operator's
/// `SinksHealthy` then turns False at the reader's next report, within seconds).
pub fn report() -> BTreeMap<String, SinkReport> {
    let mut report = health().report(Instant::now(), unready_after());
    for (sink, state) in super::circuit::states() {
        if let Some(entry) = report.get_mut(&sink) {
            entry.circuit = state.name();
            entry.stalled |= state != State::Closed;
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalled_only_when_a_sink_fails_without_a_success_for_the_whole_time() {
        let mut health = Health::default();
        let t0 = Instant::now();
        let after = Duration::from_secs(60);
        assert!(!health.stalled(t0 + Duration::from_secs(600), after), "idle is not stalled");
        health.failed("web", t0, "HTTP 503");
        health.failed("web", t0 + Duration::from_secs(30), "HTTP 503");
        assert!(!health.stalled(t0 + Duration::from_secs(59), after));
        assert!(health.stalled(t0 + Duration::from_secs(60), after), "counted from the first failure");
        health.delivered("web", 1);
        assert!(!health.stalled(t0 + Duration::from_secs(120), after), "a success clears it");
    }

    #[test]
    fn one_working_sink_does_not_hide_a_failing_one() {
        let mut health = Health::default();
        let t0 = Instant::now();
        let after = Duration::from_secs(10);
        health.failed("archive", t0, "NoSuchBucket:\n  the bucket does not exist");
        health.delivered("web", 5);
        let now = t0 + Duration::from_secs(10);
        assert!(health.stalled(now, after));
        let report = health.report(now, after);
        assert_eq!(
            report["web"],
            SinkReport {
                last_success_ms: Some(5),
                failures_since: 0,
                last_error: None,
                stalled: false,
                circuit: "closed"
            }
        );
        assert_eq!(report["archive"].failures_since, 1);
        assert_eq!(report["archive"].last_error.as_deref(), Some("NoSuchBucket: the bucket does not exist"));
        assert!(report["archive"].stalled);
    }
}
