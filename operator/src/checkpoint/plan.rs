//! One coordinator interval for one source, as a pure function: ConfigMap data in, the checkpoint
//! to write and the status to report out.
//!
//! Why apart from the I/O: the decisions (`coordinator::step` from `sluice-crds`) and what the
//! status says about them are the part worth testing exhaustively; `task.rs` only reads, writes
//! and retries.

use std::collections::BTreeMap;

use sluice_crds::checkpoint::coordinator::{self, Action, Clock, LeaseView};
use sluice_crds::checkpoint::{Checkpoint, DataError, Lease};

/// Clock difference allowed between a reader and the operator before a lease counts as expired.
pub const SKEW_MS: i64 = 1_000;

/// What the status says about checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointStatus {
    pub current_epoch: u64,
    pub committed_epoch: u64,
    pub fenced_readers: Vec<String>,
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

/// One interval. `existed`: whether the checkpoint already holds the coordinator's keys (if not,
/// the initial checkpoint is written even when the step changes nothing).
pub fn plan(
    checkpoint: &Checkpoint,
    existed: bool,
    leases: &[BTreeMap<String, String>],
    interval_ms: i64,
    now_ms: i64,
) -> Plan {
    let mut unreadable = Vec::new();
    let views: Vec<LeaseView> = leases
        .iter()
        .filter_map(|data| match Lease::from_data(data) {
            Ok(lease) => Some(LeaseView::of(&lease, now_ms, SKEW_MS)),
            Err(e) => {
                unreadable.push(format!("{}: {e}", data.get("holder").map_or("?", String::as_str)));
                None
            }
        })
        .collect();
    let step = coordinator::step(checkpoint, &views, Clock { now_ms, interval_ms });
    let next = &step.checkpoint;
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
            format!(
                "epoch {} open, {} committed, {} live readers",
                next.open,
                next.committed,
                next.live_members().count()
            ),
        )
    };
    Plan {
        write: (!step.actions.is_empty() || !existed).then(|| step.checkpoint.clone()),
        actions: step.actions,
        status: CheckpointStatus {
            current_epoch: next.open,
            committed_epoch: next.committed,
            fenced_readers,
            healthy,
            reason,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::checkpoint::Incarnation;

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
        let p = plan(&cp, false, &[lease("a", 1, 0, 0)], 10_000, 1_000);
        let written = p.write.unwrap();
        assert!(written.members.contains_key("a"));
        assert!(p.status.healthy);
        assert_eq!(p.status.current_epoch, 1);
    }

    #[test]
    fn an_unchanged_checkpoint_is_not_written() {
        let cp = Checkpoint::initial(0);
        let p = plan(&cp, true, &[], 10_000, 1_000);
        assert_eq!(p.write, None);
    }

    #[test]
    fn a_stalled_barrier_names_the_reader() {
        let cp = Checkpoint::initial(0);
        let admitted = plan(&cp, true, &[lease("a", 1, 0, 0), lease("b", 2, 0, 0)], 1_000, 1_000);
        let opened = admitted.write.unwrap();
        assert_eq!(opened.open, 2);
        // "a" acked epoch 1, "b" never does; both keep renewing.
        let p = plan(&opened, true, &[lease("a", 1, 1, 4_900), lease("b", 2, 0, 4_900)], 1_000, 5_000);
        assert!(!p.status.healthy);
        assert_eq!(p.status.reason, "BarrierStalled");
        assert!(p.status.message.contains('b'), "{}", p.status.message);
    }

    #[test]
    fn an_expired_reader_is_reported_fenced() {
        let cp = Checkpoint::initial(0);
        let admitted = plan(&cp, true, &[lease("a", 1, 0, 0)], 1_000, 1_000).write.unwrap();
        let p = plan(&admitted, true, &[lease("a", 1, 0, 0)], 1_000, 12_000);
        assert_eq!(p.status.fenced_readers, ["a"]);
        assert!(p.actions.iter().any(|a| matches!(a, Action::Fence { .. })));
    }

    #[test]
    fn an_unreadable_lease_turns_the_condition_false() {
        let mut bad = lease("a", 1, 0, 0);
        bad.insert("ackedEpoch".into(), "many".into());
        let p = plan(&Checkpoint::initial(0), true, &[bad], 1_000, 0);
        assert_eq!(p.status.reason, "LeaseUnreadable");
        assert!(p.status.message.contains("ackedEpoch"), "{}", p.status.message);
    }
}
