//! Whether deliveries are getting through, per sink, and whether S3 answers the payload fetches:
//! the last success, the failures since and the last error; and the one value a reader keeps its
//! health in ([`ReaderHealth`]).
//!
//! Why: a sink that refuses everything must turn the reader not ready, so that the fault shows
//! where people look (`/readyz`, the Deployment's ready count), and must reach the source's status
//! (`SinksHealthy`), not only counters. "Stalled" means a delivery to a sink failed and none to it
//! has succeeded for the configured time since the later of its last success and the first failure
//! after it: an idle reader (no work) is never stalled. Per sink, because one working sink must not
//! hide another that fails every message. The payload stage keeps S3 by the same rule and clock,
//! and the pollers each queue's receives: a reader that cannot reach SQS (a network path, its
//! credentials or its permissions, which the operator's own checks do not share) is not ready.
//!
//! Why one value per reader and not process-wide: two readers in one process (the tests) must not
//! share health. It is built with the reader's metrics and reached through them; the events
//! (`process::events`, `deliver::events`, `payload::events`) are what change it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::warnings::Warnings;

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

/// What a reader reports about its payload fetches from S3 (the `payloadFetches` entry beside
/// the sinks in its `sinkHealth` report).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchReport {
    /// Wall clock of S3's last answer (the object, or a permanent refusal).
    pub last_success_ms: Option<i64>,
    /// Fetches given up for S3's fault since its last answer (0: healthy).
    pub failures_since: u64,
    /// The latest failure, one line; absent once S3 answers.
    pub last_error: Option<String>,
    /// Messages are held for S3: a fetch failed for S3's fault (after its own quick attempts)
    /// and S3 has not answered since, so the message waits in the reader and its poller does
    /// not receive, as an open circuit does for a sink. Within seconds of the outage, not after
    /// `--unready-after-seconds` (that turns `/readyz` false).
    pub stalled: bool,
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
            circuit: "closed",
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

/// A call a reader makes to the Kubernetes API. Its data path needs none: these are what an
/// API server or etcd outage holds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCall {
    /// The report in its own ConfigMap (an at-least-once reader: sink health, drain rate).
    Report,
    /// A write of its lease (an exactly-once reader: the checkpoint protocol), its renewal or,
    /// after the lease was lost, its take-over by the next incarnation.
    LeaseRenewal,
    /// The read of the source's checkpoint (an exactly-once reader), which it makes whether or
    /// not it holds a lease: a reader waiting for its lost lease to be fenced writes nothing,
    /// and this is how it still sees (and says) that the API does not answer.
    CheckpointRead,
}

impl ApiCall {
    const ALL: [ApiCall; 3] = [ApiCall::Report, ApiCall::LeaseRenewal, ApiCall::CheckpointRead];

    /// The metric label and the key in [`ReaderHealth`].
    pub fn as_str(self) -> &'static str {
        match self {
            ApiCall::Report => "report",
            ApiCall::LeaseRenewal => "lease_renewal",
            ApiCall::CheckpointRead => "checkpoint_read",
        }
    }

    /// What the API did not take or answer, as `/readyz` says it.
    fn noun(self) -> &'static str {
        match self {
            ApiCall::Report => "taken this reader's report",
            ApiCall::LeaseRenewal => "taken this reader's lease write",
            ApiCall::CheckpointRead => "answered this reader's checkpoint read",
        }
    }

    /// What the reader does while the call fails.
    fn meanwhile(self) -> &'static str {
        match self {
            ApiCall::Report => "delivery goes on, the report is retried every 5 s",
            ApiCall::LeaseRenewal => {
                "commits wait for the API; once the lease runs out this incarnation stops receiving, and rejoins when the API is back"
            }
            ApiCall::CheckpointRead => {
                "commits wait until the checkpoint is read again; receiving goes on while the lease holds, the read is retried every 250 ms"
            }
        }
    }
}

/// The one entry the payload stage keeps in its `Health`.
const S3: &str = "s3";

/// One reader's health: its sinks, its payload fetches, its targets, and the rate limit of its
/// WARN lines.
pub struct ReaderHealth {
    sinks: Mutex<Health>,
    fetches: Mutex<Health>,
    /// ReceiveMessage per queue (by name), by the same rule: SQS unreachable or refusing this
    /// reader (network, credentials, permissions) while the operator's own checks may still pass.
    receives: Mutex<Health>,
    /// This reader's writes to the Kubernetes API ([`ApiCall`]): said in `/readyz`'s text, never
    /// turning the reader unready (delivery needs no API call; see docs/control-plane-faults.md).
    api: Mutex<Health>,
    /// `--unready-after-seconds`, in milliseconds.
    unready_after_ms: AtomicU64,
    targets_missing: AtomicBool,
    warnings: Arc<Warnings>,
}

impl Default for ReaderHealth {
    fn default() -> Self {
        Self {
            sinks: Mutex::default(),
            fetches: Mutex::default(),
            receives: Mutex::default(),
            api: Mutex::default(),
            unready_after_ms: AtomicU64::new(60_000),
            targets_missing: AtomicBool::new(false),
            warnings: Arc::default(),
        }
    }
}

fn lock(health: &Mutex<Health>) -> MutexGuard<'_, Health> {
    health.lock().unwrap_or_else(|e| e.into_inner())
}

impl ReaderHealth {
    /// How long a sink or the fetches may fail without a success before they count as stalled
    /// (the reader's `--unready-after-seconds`); set once at start.
    pub fn set_unready_after(&self, after: Duration) {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        self.unready_after_ms.store(ms, Ordering::Relaxed);
    }

    pub fn unready_after(&self) -> Duration {
        Duration::from_millis(self.unready_after_ms.load(Ordering::Relaxed))
    }

    /// The rate limit of this reader's WARN lines (for the stages that word their own lines).
    pub fn warnings(&self) -> &Arc<Warnings> {
        &self.warnings
    }

    /// Some sink has had no success for the configured time while deliveries to it fail (its
    /// circuit aside: `settle::held_report::ReaderReport` adds it).
    pub fn sinks_stalled(&self) -> bool {
        lock(&self.sinks).stalled(Instant::now(), self.unready_after())
    }

    /// Every sink that was ever tried, by name, each with its circuit `closed` (`ReaderReport`
    /// fills in the circuits).
    pub fn sink_report(&self) -> BTreeMap<String, SinkReport> {
        lock(&self.sinks).report(Instant::now(), self.unready_after())
    }

    /// Fetches from S3 have failed, with no answer since, for the configured time.
    pub fn fetches_stalled(&self) -> bool {
        lock(&self.fetches).stalled(Instant::now(), self.unready_after())
    }

    /// Receives from some queue have failed, with no answer since, for the configured time.
    pub fn receives_stalled(&self) -> bool {
        lock(&self.receives).stalled(Instant::now(), self.unready_after())
    }

    /// The payload fetches' entry of the report; `None` until a fetch was answered or failed
    /// (a source that fetches no payloads reports none).
    pub fn fetch_report(&self) -> Option<FetchReport> {
        let fetches = lock(&self.fetches);
        let s3 = fetches.sinks.get(S3)?;
        Some(FetchReport {
            last_success_ms: s3.last_success_ms,
            failures_since: s3.failures_since_success,
            last_error: s3.last_error.clone(),
            stalled: s3.failures_since_success > 0,
        })
    }

    /// Some target the source names was missing or forbidden at the last check.
    pub fn targets_missing(&self) -> bool {
        self.targets_missing.load(Ordering::Relaxed)
    }

    pub(crate) fn sink_delivered(&self, sink: &str) {
        lock(&self.sinks).delivered(sink, sluice_protocol::now_ms());
    }

    pub(crate) fn sink_failed(&self, sink: &str, reason: &str) {
        lock(&self.sinks).failed(sink, Instant::now(), reason);
    }

    pub(crate) fn fetch_answered(&self) {
        lock(&self.fetches).delivered(S3, sluice_protocol::now_ms());
    }

    pub(crate) fn fetch_failed(&self, reason: &str) {
        lock(&self.fetches).failed(S3, Instant::now(), reason);
    }

    pub(crate) fn receive_answered(&self, queue: &str) {
        lock(&self.receives).delivered(queue, sluice_protocol::now_ms());
    }

    pub(crate) fn receive_failed(&self, queue: &str, reason: &str) {
        lock(&self.receives).failed(queue, Instant::now(), reason);
    }

    pub(crate) fn api_answered(&self, write: ApiCall) {
        lock(&self.api).delivered(write.as_str(), sluice_protocol::now_ms());
    }

    pub(crate) fn api_failed(&self, write: ApiCall, reason: &str) {
        lock(&self.api).failed(write.as_str(), Instant::now(), reason);
    }

    /// While a call to the Kubernetes API has failed with none of its kind answered since: one line
    /// saying which, for how long, the last error and what the reader does meanwhile.
    pub fn api_note(&self) -> Option<String> {
        let api = lock(&self.api);
        let now = Instant::now();
        // The first failing in `ApiCall::ALL`'s order: a lease write says more than a read.
        let (write, health) = ApiCall::ALL.into_iter().find_map(|call| {
            api.sinks.get(call.as_str()).filter(|h| h.failing_since.is_some()).map(|h| (call, h))
        })?;
        let seconds = health.failing_since.map_or(0, |since| now.duration_since(since).as_secs());
        let error = health.last_error.as_deref().unwrap_or("no answer");
        Some(format!(
            "the Kubernetes API has not {} for {seconds} s ({error}): {}",
            write.noun(),
            write.meanwhile()
        ))
    }

    pub(crate) fn set_targets_missing(&self, missing: bool) {
        self.targets_missing.store(missing, Ordering::Relaxed);
    }
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
    fn fetches_report_stalled_from_the_first_failure_until_s3_answers() {
        let health = ReaderHealth::default();
        assert_eq!(health.fetch_report(), None, "no fetch, no entry");
        health.fetch_answered();
        let answered = health.fetch_report().expect("an entry");
        assert!(!answered.stalled && answered.failures_since == 0 && answered.last_success_ms.is_some());
        health.fetch_failed("GetObject s3://b/k: connection refused");
        let failing = health.fetch_report().expect("an entry");
        assert!(failing.stalled, "a held fetch is stalled at once: {failing:?}");
        assert!(!health.fetches_stalled(), "readiness waits for --unready-after-seconds");
        assert_eq!(failing.last_error.as_deref(), Some("GetObject s3://b/k: connection refused"));
        health.fetch_answered();
        assert!(!health.fetch_report().expect("an entry").stalled, "S3 answered");
    }

    #[test]
    fn an_api_write_failing_is_said_until_one_of_its_kind_is_taken() {
        let health = ReaderHealth::default();
        assert_eq!(health.api_note(), None);
        health.api_failed(ApiCall::Report, "client error (Connect)");
        let note = health.api_note().expect("a note while failing");
        assert!(note.starts_with("the Kubernetes API has not taken this reader's report for 0 s (client error (Connect)): delivery goes on"), "{note}");
        health.api_answered(ApiCall::Report);
        assert_eq!(health.api_note(), None, "taken again");
    }

    #[test]
    fn a_failing_checkpoint_read_is_said_and_a_failing_lease_write_said_first() {
        let health = ReaderHealth::default();
        health.api_failed(ApiCall::CheckpointRead, "client error (Connect)");
        let note = health.api_note().expect("a note while the reads fail");
        assert!(
            note.starts_with("the Kubernetes API has not answered this reader's checkpoint read for 0 s"),
            "{note}"
        );
        health.api_failed(ApiCall::LeaseRenewal, "client error (Connect)");
        let note = health.api_note().expect("a note while both fail");
        assert!(note.starts_with("the Kubernetes API has not taken this reader's lease write"), "{note}");
        health.api_answered(ApiCall::LeaseRenewal);
        health.api_answered(ApiCall::CheckpointRead);
        assert_eq!(health.api_note(), None, "answered again");
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
