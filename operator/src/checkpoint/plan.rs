//! One coordinator interval for one source, as a pure function: ConfigMap data in, the checkpoint
//! to write and the status to report out.
//!
//! Why apart from the I/O: the decisions (`coordinator::step` from `sluice-crds`) and what the
//! status says about them are the part worth testing exhaustively; `task.rs` only reads, writes
//! and retries.

use std::collections::BTreeMap;

use sluice_protocol::coordinator::{self, Action, Clock, LeaseView};
use sluice_protocol::{Checkpoint, DataError, Epoch, Lease};

/// Clock difference allowed between a reader and the operator before a lease counts as expired.
pub const SKEW_MS: i64 = 1_000;

/// What the status says about checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointStatus {
    pub current_epoch: u64,
    pub committed_epoch: u64,
    pub fenced_readers: Vec<String>,
    /// Members whose lease has not run out (what commits wait for).
    pub live_readers: usize,
    /// The last barrier's duration in milliseconds (see [`barrier_durations`]); carried over from
    /// the previous interval while nothing commits.
    pub last_barrier_ms: Option<u64>,
    pub healthy: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The outcome of one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The checkpoint to write (compare-and-swap on the version read); `None`: nothing changed.
    pub write: Option<Checkpoint>,
    pub actions: Vec<Action>,
    /// The barriers this interval completed: (epoch committed, milliseconds it waited).
    pub barriers: Vec<(Epoch, u64)>,
    pub status: CheckpointStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "checkpoint ConfigMap is unreadable: {0}; fix or delete the key (deleting the ConfigMap restarts epochs at 1)"
)]
pub struct PlanError(#[from] pub DataError);

/// Reads the checkpoint data; `None` (no ConfigMap yet, or one the autoscaler created with only
/// `replicas`) starts the protocol at epoch 1.
pub fn read_checkpoint(
    data: Option<&BTreeMap<String, String>>,
    now_ms: i64,
) -> Result<Checkpoint, PlanError> {
    match data {
        Some(data) if data.contains_key("openEpoch") => Ok(Checkpoint::from_data(data)?),
        Some(data) => {
            let mut cp = Checkpoint::initial(now_ms);
            cp.replicas = data.get("replicas").and_then(|r| r.parse().ok());
            Ok(cp)
        }
        None => Ok(Checkpoint::initial(now_ms)),
    }
}

/// How long the barriers of the epochs that `actions` commit took: from the epoch's close (the
/// moment the next epoch opened) to `now_ms`, in commit order. `before` is the checkpoint the step
/// started from.
///
/// Why only the epoch `before.open - 1`: that epoch closed at `before.opened_at_ms`, when the open
/// epoch opened. The coordinator opens E+1 only once E-1 is committed, so it is the only closed
/// epoch a step can commit; an older one (a checkpoint written by something else) closed at a time
/// nothing records, and a guess would understate its barrier, so it gets no duration. A negative
/// difference (the epoch was opened by a previous leader whose clock ran ahead) counts as 0.
pub fn barrier_durations(before: &Checkpoint, actions: &[Action], now_ms: i64) -> Vec<(Epoch, u64)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Commit { epoch, .. } if epoch.checked_add(1) == Some(before.open) => {
                Some((*epoch, u64::try_from(now_ms.saturating_sub(before.opened_at_ms)).unwrap_or(0)))
            }
            _ => None,
        })
        .collect()
}

/// One interval. `existed`: whether the checkpoint already holds the coordinator's keys (if not,
/// the initial checkpoint is written even when the step changes nothing). `last_barrier_ms`: the
/// barrier duration reported so far, kept when this interval commits nothing.
pub fn plan(
    checkpoint: &Checkpoint,
    existed: bool,
    leases: &[BTreeMap<String, String>],
    interval_ms: i64,
    now_ms: i64,
    last_barrier_ms: Option<u64>,
) -> Plan {
    let mut unreadable = Vec::new();
    let views: Vec<LeaseView> = leases
        .iter()
        // A reader that held no protocol lease (atLeastOnce, before a switch of guarantee) wrote
        // only its sink health there: not a member, and not unreadable either.
        .filter(|data| data.contains_key("holder") || data.contains_key("incarnation"))
        .filter_map(|data| match Lease::from_data(data) {
            Ok(lease) => Some(LeaseView::of(&lease, now_ms, SKEW_MS)),
            Err(e) => {
                unreadable.push(format!("{}: {e}", data.get("holder").map_or("?", String::as_str)));
                None
            }
        })
        .collect();
    let step = coordinator::step(checkpoint, &views, Clock { now_ms, interval_ms });
    let barriers = barrier_durations(checkpoint, &step.actions, now_ms);
    let next = &step.checkpoint;
    let live_readers = next.live_members().count();
    let waiting = coordinator::waiting_for(next, &views);
    let fenced_readers: Vec<String> =
        next.members.iter().filter(|(_, m)| m.fenced.is_some()).map(|(pod, _)| pod.clone()).collect();
    let stalled_for = now_ms - next.opened_at_ms;
    let (healthy, reason, message) = if !unreadable.is_empty() {
        (false, "LeaseUnreadable", format!("lease ConfigMaps cannot be read: {}", unreadable.join("; ")))
    } else if !waiting.is_empty() && stalled_for > 3 * interval_ms {
        (
            false,
            "BarrierStalled",
            format!(
                "epoch {} has waited {} s for the ack of {}",
                next.committed + 1,
                stalled_for / 1000,
                waiting.join(", ")
            ),
        )
    } else {
        (
            true,
            "EpochsCommitting",
            format!("epoch {} open, {} committed, {} live readers", next.open, next.committed, live_readers),
        )
    };
    Plan {
        write: (!step.actions.is_empty() || !existed).then(|| step.checkpoint.clone()),
        actions: step.actions,
        status: CheckpointStatus {
            current_epoch: next.open,
            committed_epoch: next.committed,
            fenced_readers,
            live_readers,
            last_barrier_ms: barriers.last().map(|&(_, ms)| ms).or(last_barrier_ms),
            healthy,
            reason,
            message,
        },
        barriers,
    }
}

#[cfg(test)]
mod tests {
    use sluice_protocol::Incarnation;

    use super::*;

    fn lease(pod: &str, inc: u64, acked: u64, renewed_at_ms: i64) -> BTreeMap<String, String> {
        let mut lease = Lease::new(pod, Incarnation(inc), renewed_at_ms, 10);
        lease.acked_epoch = acked;
        lease.to_data().unwrap()
    }

    #[test]
    fn a_missing_or_scaler_only_configmap_starts_at_epoch_one() {
        assert_eq!(read_checkpoint(None, 5).unwrap(), Checkpoint::initial(5));
        let scaler_only = BTreeMap::from([("replicas".to_string(), "3".to_string())]);
        let cp = read_checkpoint(Some(&scaler_only), 5).unwrap();
        assert_eq!((cp.open, cp.committed, cp.replicas), (1, 0, Some(3)));
    }

    #[test]
    fn a_corrupt_checkpoint_is_an_error_naming_the_key() {
        let data = BTreeMap::from([("openEpoch".to_string(), "x".to_string())]);
        let err = read_checkpoint(Some(&data), 0).unwrap_err().to_string();
        assert!(err.contains("openEpoch"), "{err}");
    }

    #[test]
    fn the_first_interval_writes_the_initial_checkpoint_and_admits_readers() {
        let cp = Checkpoint::initial(0);
        let p = plan(&cp, false, &[lease("a", 1, 0, 0)], 10_000, 1_000, None);
        let written = p.write.unwrap();
        assert!(written.members.contains_key("a"));
        assert!(p.status.healthy);
        assert_eq!(p.status.current_epoch, 1);
    }

    #[test]
    fn an_unchanged_checkpoint_is_not_written() {
        let cp = Checkpoint::initial(0);
        let p = plan(&cp, true, &[], 10_000, 1_000, None);
        assert_eq!(p.write, None);
    }

    #[test]
    fn a_stalled_barrier_names_the_reader() {
        let cp = Checkpoint::initial(0);
        let admitted = plan(&cp, true, &[lease("a", 1, 0, 0), lease("b", 2, 0, 0)], 1_000, 1_000, None);
        let opened = admitted.write.unwrap();
        assert_eq!(opened.open, 2);
        // "a" acked epoch 1, "b" never does; both keep renewing.
        let p = plan(&opened, true, &[lease("a", 1, 1, 4_900), lease("b", 2, 0, 4_900)], 1_000, 5_000, None);
        assert!(!p.status.healthy);
        assert_eq!(p.status.reason, "BarrierStalled");
        assert!(p.status.message.contains('b'), "{}", p.status.message);
    }

    #[test]
    fn an_expired_reader_is_reported_fenced() {
        let cp = Checkpoint::initial(0);
        let admitted = plan(&cp, true, &[lease("a", 1, 0, 0)], 1_000, 1_000, None).write.unwrap();
        let p = plan(&admitted, true, &[lease("a", 1, 0, 0)], 1_000, 12_000, None);
        assert_eq!(p.status.fenced_readers, ["a"]);
        assert!(p.actions.iter().any(|a| matches!(a, Action::Fence { .. })));
    }

    #[test]
    fn an_unreadable_lease_turns_the_condition_false() {
        let mut bad = lease("a", 1, 0, 0);
        bad.insert("ackedEpoch".into(), "many".into());
        let p = plan(&Checkpoint::initial(0), true, &[bad], 1_000, 0, None);
        assert_eq!(p.status.reason, "LeaseUnreadable");
        assert!(p.status.message.contains("ackedEpoch"), "{}", p.status.message);
    }

    /// Admits "a" at 1_000 and opens epoch 2 (closing 1) at `opened_at`.
    fn epoch_one_closed_at(opened_at: i64) -> Checkpoint {
        let admitted = plan(&Checkpoint::initial(0), true, &[lease("a", 1, 0, 0)], 1_000, 1_000, None);
        let mut cp = admitted.write.unwrap();
        assert_eq!(cp.open, 2);
        cp.opened_at_ms = opened_at;
        cp
    }

    #[test]
    fn a_commit_reports_the_time_since_its_epoch_closed() {
        let closed = epoch_one_closed_at(10_000);
        let p = plan(&closed, true, &[lease("a", 1, 1, 13_000)], 60_000, 13_500, Some(99));
        assert!(p.actions.iter().any(|a| matches!(a, Action::Commit { epoch: 1, .. })));
        assert_eq!(p.barriers, [(1, 3_500)]);
        assert_eq!(p.status.last_barrier_ms, Some(3_500));
        assert_eq!(p.status.live_readers, 1);
    }

    #[test]
    fn without_a_commit_the_last_barrier_is_kept() {
        let closed = epoch_one_closed_at(10_000);
        // "a" has not acked epoch 1 yet.
        let p = plan(&closed, true, &[lease("a", 1, 0, 13_000)], 60_000, 13_500, Some(99));
        assert!(p.barriers.is_empty());
        assert_eq!(p.status.last_barrier_ms, Some(99));
        let first = plan(&closed, true, &[lease("a", 1, 0, 13_000)], 60_000, 13_500, None);
        assert_eq!(first.status.last_barrier_ms, None);
    }

    #[test]
    fn a_commit_and_an_open_in_one_step_time_the_committed_epoch() {
        // The interval has elapsed: epoch 1 commits and epoch 3 opens in the same step; the barrier
        // is epoch 1's, measured from epoch 2's opening, not from now.
        let closed = epoch_one_closed_at(10_000);
        let p = plan(&closed, true, &[lease("a", 1, 1, 20_000)], 1_000, 20_000, None);
        assert!(p.actions.iter().any(|a| matches!(a, Action::Open { epoch: 3, .. })));
        assert_eq!(p.barriers, [(1, 10_000)]);
    }

    #[test]
    fn only_the_epoch_closed_by_the_open_one_is_timed() {
        let mut before = Checkpoint::initial(0);
        before.open = 4;
        before.opened_at_ms = 7_000;
        let commits: Vec<Action> =
            (1..=3).map(|epoch| Action::Commit { epoch, barrier: Vec::new() }).collect();
        // Epochs 1 and 2 closed at times nothing recorded; 3 closed when 4 opened.
        assert_eq!(barrier_durations(&before, &commits, 9_000), [(3, 2_000)]);
        // A previous leader's clock ahead of ours: 0, not a negative duration.
        assert_eq!(barrier_durations(&before, &commits, 6_000), [(3, 0)]);
    }
}
