//! What a replay does with each dead letter, and where a restarted replay picks up: pure, so the
//! rules that keep a message from being replayed twice are tested without SQS.
//!
//! Why two guards: the per-request marker (`sluice-replay-id` on every copy sent back) stops a
//! message that fails again and is dead-lettered again from going round the same request without
//! end; the batch journal in `status.replay.batch` covers an operator that stops between
//! SendMessageBatch and DeleteMessageBatch. A batch recorded `sent` is deleted on restart and not
//! sent again; a batch recorded `sending` may or may not have reached the source, and SQS offers
//! no way to ask, so it is left in the dead-letter queue and counted `uncertain`: never twice,
//! never lost.

use std::collections::HashSet;

use k8s_openapi::jiff::Timestamp;
use sluice_crds::{ReplayBatch, ReplaySpec, ReplayStatus};

/// The attribute every replayed copy carries: the id of the request that sent it.
pub const MARKER: &str = "sluice-replay-id";
/// Attributes the reader's dead-letter route adds; the copy sent back goes without them.
pub const DEAD_LETTER_CONTEXT: [&str; 4] =
    ["sluice-dlq-reason", "sluice-source-message-id", "sluice-source-queue", "sluice-dead-letter"];
/// Phases of `status.replay.phase`.
pub const RUNNING: &str = "Running";
pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "Failed";
/// Stages of `status.replay.batch.stage`.
pub const SENDING: &str = "sending";
pub const SENT: &str = "sent";

/// The request's filter, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    pub after_ms: Option<i64>,
    pub before_ms: Option<i64>,
    pub reason_contains: Option<String>,
}

impl Window {
    /// Parses the request's times; `Err` names the field and what to write instead.
    pub fn of(spec: &ReplaySpec) -> Result<Self, String> {
        let parse = |value: &Option<String>, field: &str| -> Result<Option<i64>, String> {
            value
                .as_deref()
                .map(|v| {
                    v.parse::<Timestamp>().map(|t| t.as_millisecond()).map_err(|e| {
                        format!("spec.replay.{field} is not an RFC 3339 time ({e}): write it as 2026-12-02T13:00:00Z")
                    })
                })
                .transpose()
        };
        Ok(Self {
            after_ms: parse(&spec.dead_lettered_after, "deadLetteredAfter")?,
            before_ms: parse(&spec.dead_lettered_before, "deadLetteredBefore")?,
            reason_contains: spec.reason_contains.clone(),
        })
    }
}

/// What the mover sees of one dead letter.
#[derive(Clone, Debug, Default)]
pub struct Candidate<'a> {
    pub id: &'a str,
    /// `SentTimestamp`: when it was dead-lettered.
    pub sent_ms: Option<i64>,
    /// Its dead-letter reason, if it carries one.
    pub reason: Option<&'a str>,
    /// Its `sluice-replay-id`, if an earlier replay sent it.
    pub marker: Option<&'a str>,
}

/// Why a message stays in the dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Outside the time window or of another reason.
    NotAsked,
    /// This request replayed it once already and it was dead-lettered again.
    ReplayedBefore,
    /// Its batch was in flight when the operator stopped (`uncertain`).
    LeftBehind,
}

/// The decision for one dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Replay,
    /// Sent before a restart, not yet deleted: delete it, do not send it again.
    DeleteOnly,
    Keep(Skip),
}

/// Where a restarted request stands.
#[derive(Debug, Default)]
pub struct Memory {
    pub delete_only: HashSet<String>,
    pub left_behind: HashSet<String>,
}

/// Decides what happens to `c` under request `id`.
pub fn judge(id: &str, window: &Window, memory: &Memory, c: &Candidate<'_>) -> Verdict {
    if memory.delete_only.contains(c.id) {
        return Verdict::DeleteOnly;
    }
    if memory.left_behind.contains(c.id) {
        return Verdict::Keep(Skip::LeftBehind);
    }
    if c.marker == Some(id) {
        return Verdict::Keep(Skip::ReplayedBefore);
    }
    let in_window = match c.sent_ms {
        Some(t) => window.after_ms.is_none_or(|a| t >= a) && window.before_ms.is_none_or(|b| t < b),
        None => window.after_ms.is_none() && window.before_ms.is_none(),
    };
    let reason_ok = match &window.reason_contains {
        Some(wanted) => c.reason.is_some_and(|r| r.contains(wanted.as_str())),
        None => true,
    };
    if in_window && reason_ok { Verdict::Replay } else { Verdict::Keep(Skip::NotAsked) }
}

/// Where request `id` goes on from: this status, after deleting `receipts` (a batch recorded
/// `sent`).
#[derive(Debug)]
pub struct Resume {
    pub status: ReplayStatus,
    pub memory: Memory,
    pub receipts: Vec<String>,
}

/// Reads the last written status for request `id` (`now` stamps a fresh start); `None` when the
/// request is done (completed or failed).
pub fn resume(previous: Option<&ReplayStatus>, id: &str, now: &str) -> Option<Resume> {
    let Some(previous) = previous.filter(|p| p.id == id) else {
        let status = ReplayStatus {
            id: id.to_owned(),
            phase: RUNNING.to_owned(),
            started_at: Some(now.to_owned()),
            ..ReplayStatus::default()
        };
        return Some(Resume { status, memory: Memory::default(), receipts: Vec::new() });
    };
    if previous.phase != RUNNING {
        return None;
    }
    let mut status = previous.clone();
    let mut memory = Memory::default();
    let mut receipts = Vec::new();
    match status.batch.take() {
        Some(ReplayBatch { stage, ids, receipts: handles }) if stage == SENT => {
            memory.delete_only.extend(ids);
            receipts = handles;
        }
        Some(ReplayBatch { ids, .. }) => {
            status.uncertain += ids.len() as u64;
            status.left_behind.extend(ids);
        }
        None => {}
    }
    memory.left_behind.extend(status.left_behind.iter().cloned());
    Some(Resume { status, memory, receipts })
}

/// The queue a dead letter goes back to: the source queue its `sluice-source-queue` names when
/// that is one of `queues`, else the first of `queues`.
pub fn target<'a>(queues: &'a [String], named: Option<&str>) -> Option<&'a String> {
    named.and_then(|n| queues.iter().find(|q| q.as_str() == n)).or_else(|| queues.first())
}

/// How long to wait before sending `n` more messages at `rate` per second, given when the next
/// slot opens (`next_ms`) and the time now; answers the wait and the slot after this batch.
pub fn pace(next_ms: i64, now_ms: i64, n: usize, rate: u32) -> (u64, i64) {
    let start = next_ms.max(now_ms);
    let spend = (n as i64 * 1000) / i64::from(rate.max(1));
    (u64::try_from(start - now_ms).unwrap_or(0), start + spend)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(id: &'a str, sent_ms: i64, reason: Option<&'a str>, marker: Option<&'a str>) -> Candidate<'a> {
        Candidate { id, sent_ms: Some(sent_ms), reason, marker }
    }

    #[test]
    fn the_window_the_reason_and_the_marker_decide() {
        let window =
            Window { after_ms: Some(100), before_ms: Some(200), reason_contains: Some("HTTP 400".into()) };
        let m = Memory::default();
        assert_eq!(judge("r1", &window, &m, &c("a", 150, Some("HTTP 400 Bad"), None)), Verdict::Replay);
        assert_eq!(
            judge("r1", &window, &m, &c("a", 200, Some("HTTP 400"), None)),
            Verdict::Keep(Skip::NotAsked)
        );
        assert_eq!(
            judge("r1", &window, &m, &c("a", 99, Some("HTTP 400"), None)),
            Verdict::Keep(Skip::NotAsked)
        );
        assert_eq!(
            judge("r1", &window, &m, &c("a", 150, Some("HTTP 500"), None)),
            Verdict::Keep(Skip::NotAsked)
        );
        assert_eq!(judge("r1", &window, &m, &c("a", 150, None, None)), Verdict::Keep(Skip::NotAsked));
        let all = Window::default();
        assert_eq!(
            judge("r1", &all, &m, &c("a", 150, None, Some("r1"))),
            Verdict::Keep(Skip::ReplayedBefore),
            "a copy this request sent and that was dead-lettered again goes round once only"
        );
        assert_eq!(judge("r2", &all, &m, &c("a", 150, None, Some("r1"))), Verdict::Replay);
    }

    #[test]
    fn a_restart_deletes_a_sent_batch_and_leaves_a_sending_one_behind() {
        let batch = |stage: &str| ReplayStatus {
            id: "r1".into(),
            phase: RUNNING.into(),
            replayed: 150,
            batch: Some(ReplayBatch {
                stage: stage.into(),
                ids: vec!["a".into(), "b".into()],
                receipts: vec!["h".into()],
            }),
            ..ReplayStatus::default()
        };
        let Resume { status, memory, receipts } = resume(Some(&batch(SENT)), "r1", "t").unwrap();
        assert_eq!((status.replayed, status.uncertain, receipts), (150, 0, vec!["h".to_owned()]));
        let w = Window::default();
        assert_eq!(judge("r1", &w, &memory, &c("a", 1, None, None)), Verdict::DeleteOnly);
        let Resume { status, memory, .. } = resume(Some(&batch(SENDING)), "r1", "t").unwrap();
        assert_eq!((status.uncertain, status.left_behind.len()), (2, 2));
        assert_eq!(judge("r1", &w, &memory, &c("b", 1, None, None)), Verdict::Keep(Skip::LeftBehind));
        assert!(status.batch.is_none());
    }

    #[test]
    fn a_finished_request_is_not_started_again_and_a_new_id_starts_fresh() {
        let done =
            ReplayStatus { id: "r1".into(), phase: COMPLETED.into(), replayed: 3, ..ReplayStatus::default() };
        assert!(resume(Some(&done), "r1", "t").is_none());
        let Resume { status, .. } = resume(Some(&done), "r2", "t").unwrap();
        assert_eq!((status.id.as_str(), status.replayed, status.started_at.as_deref()), ("r2", 0, Some("t")));
    }

    #[test]
    fn the_target_is_the_named_source_queue_or_the_first() {
        let queues = vec!["q1".to_owned(), "q2".to_owned()];
        assert_eq!(target(&queues, Some("q2")), Some(&queues[1]));
        assert_eq!(target(&queues, Some("elsewhere")), Some(&queues[0]));
        assert_eq!(target(&queues, None), Some(&queues[0]));
    }

    #[test]
    fn pacing_spends_a_slot_per_message() {
        assert_eq!(pace(0, 1000, 10, 50), (0, 1200));
        assert_eq!(pace(1200, 1100, 10, 50), (100, 1400));
    }

    #[test]
    fn bad_times_name_the_field() {
        let spec = ReplaySpec {
            id: "r".into(),
            rate_per_second: 1,
            dead_lettered_after: Some("yesterday".into()),
            dead_lettered_before: None,
            reason_contains: None,
        };
        assert!(Window::of(&spec).unwrap_err().contains("spec.replay.deadLetteredAfter"));
    }
}
