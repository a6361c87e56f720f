//! What the payload stage observes: fetches from S3 that fail and are held, S3's answers, objects
//! that cannot be read and streamed reads resumed. Each `emit` counts, writes its WARN line (at
//! most one per kind per `warnings::WINDOW`, with the count) and keeps the fetch health that turns
//! `/readyz` false while S3 fails every fetch for `--unready-after-seconds`.
//!
//! An answer is any reply that says S3 is reachable: the object, or a permanent refusal (missing,
//! denied, too large).

use crate::process::events::{About, Event, Fault, warn};
use crate::process::metrics::Metrics;

/// `object fetch {kind}`: one WARN line if one is due.
fn warn_fetch(metrics: &Metrics, kind: &'static str, reason: &str) {
    warn(metrics, About::Reader("object fetch"), kind, |failures, window| {
        format!("object fetch {kind} ({failures} in up to {window} s): {reason}")
    });
}

/// A fetch gave up, after its own quick attempts, for S3's fault.
pub struct FetchFailed<'a> {
    pub reason: &'a str,
}

impl Event for FetchFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.health.fetch_failed(self.reason);
    }
}

/// S3 answered a fetch (with the object or a permanent refusal).
pub struct FetchAnswered;

impl Event for FetchAnswered {
    fn emit(self, metrics: &Metrics) {
        metrics.health.fetch_answered();
    }
}

/// A message whose fetch failed for S3's fault is held and fetched again, or (`handing_back`)
/// handed back to the queue near SQS's 12 h visibility cap.
pub struct FetchHeld<'a> {
    pub reason: &'a str,
    pub handing_back: bool,
}

impl Event for FetchHeld<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::FetchFailed);
        let reason = if self.handing_back {
            format!("{}; held for nearly SQS's 12 h visibility cap: handing back", self.reason)
        } else {
            format!(
                "{}; the message stays invisible and is fetched again (1 s doubling to 30 s)",
                self.reason
            )
        };
        warn_fetch(metrics, "failed", &reason);
    }
}

/// An object a message names cannot be read: the message is dead-lettered.
pub struct ObjectUnreadable<'a> {
    pub reason: &'a str,
}

impl Event for ObjectUnreadable<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::UnreadableObject);
        warn_fetch(metrics, "unreadable", self.reason);
    }
}

/// A streamed read was cut midway and read on from where it stopped.
pub struct ReadResumed<'a> {
    pub reason: &'a str,
}

impl Event for ReadResumed<'_> {
    fn emit(self, metrics: &Metrics) {
        warn_fetch(metrics, "resumed", self.reason);
    }
}

/// Objects behind deleted messages left in place (`kind`: `failed`, S3 did not take the delete;
/// `dropped`, too many waited for deletion): counted in `payload_object_deletes_total`, and one
/// WARN line per kind per window, with the count.
pub struct ObjectsLeft<'a> {
    pub kind: &'static str,
    pub objects: u64,
    pub reason: &'a str,
}

impl Event for ObjectsLeft<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.payload.object_deletes(self.kind, self.objects);
        let (kind, reason) = (self.kind, self.reason);
        warn(metrics, About::Reader("object delete"), kind, |failures, window| {
            format!("object delete {kind} ({failures} in up to {window} s): {reason}")
        });
    }
}
