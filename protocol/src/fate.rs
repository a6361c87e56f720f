//! What became of an acked epoch, decided from the ConfigMaps alone: committed, aborted, or not yet
//! known. Readers use it for three things: to finish their own epochs, to handle a redelivered
//! message that another reader already acked, and to carry committed ids over when they rejoin.
//!
//! Why from the ConfigMaps alone: the reader that acked the epoch may be dead, paused or fenced;
//! whoever receives its messages again must reach the same verdict it would.

use super::checkpoint_data::Checkpoint;
use super::ids::IdSet;
use super::lease_data::Lease;
use super::types::{Epoch, EpochKey, Incarnation};

/// The fate of one id entry of a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The epoch is committed for this incarnation: its output must become visible and its
    /// messages deleted, never delivered again.
    Committed,
    /// The epoch can never commit for this incarnation (it was fenced first).
    Aborted,
    /// Not decided yet, or not decidable from this version of the checkpoint.
    Undecided,
}

/// The fate of epoch `epoch` of incarnation `incarnation`, recorded in `lease`.
pub fn fate(checkpoint: &Checkpoint, lease: &Lease, incarnation: Incarnation, epoch: Epoch) -> Fate {
    if incarnation != lease.incarnation {
        // Only committed entries are carried over to a later incarnation (see `rejoin`).
        return Fate::Committed;
    }
    match checkpoint.members.get(&lease.holder) {
        Some(m) if m.incarnation == incarnation => match m.fenced {
            None if epoch <= checkpoint.committed => Fate::Committed,
            None => Fate::Undecided,
            Some(through) if epoch <= through => Fate::Committed,
            Some(_) => Fate::Aborted,
        },
        // Not (or no longer) visible as a member in this checkpoint version: ask again later.
        _ => Fate::Undecided,
    }
}

/// What to do with a received message whose id may already be recorded in some lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// No lease records it as committed or pending: deliver it.
    Fresh,
    /// Committed in `key`'s epoch: make that output visible (idempotent), then delete the message
    /// without delivering it.
    Committed(EpochKey),
    /// Recorded in an acked epoch whose fate is not known yet: neither deliver nor delete; release
    /// it so that it comes back after the commit or the fence.
    Undecided,
}

/// Classifies a received message against every lease of the source. The leases must be read
/// before the checkpoint (a consistent list, not a stale cache, for a message whose receive count
/// is above 1), so that the checkpoint is at least as new as every entry seen.
pub fn classify<'a>(
    id: &str,
    checkpoint: &Checkpoint,
    leases: impl IntoIterator<Item = &'a Lease>,
) -> Redelivery {
    let mut undecided = false;
    for lease in leases {
        for ((inc, epoch), set) in &lease.ids {
            if !set.contains(id) {
                continue;
            }
            match fate(checkpoint, lease, *inc, *epoch) {
                Fate::Committed => {
                    return Redelivery::Committed(EpochKey {
                        pod: lease.holder.clone(),
                        incarnation: *inc,
                        epoch: *epoch,
                    });
                }
                Fate::Undecided => undecided = true,
                Fate::Aborted => {}
            }
        }
    }
    if undecided { Redelivery::Undecided } else { Redelivery::Fresh }
}

/// Whether a new incarnation may take over `old` now: the previous incarnation must be fenced (or
/// never admitted), so that the fate of each of its entries is final.
pub fn can_rejoin(checkpoint: &Checkpoint, old: &Lease) -> bool {
    match checkpoint.members.get(&old.holder) {
        Some(m) if m.incarnation == old.incarnation => m.fenced.is_some(),
        _ => true,
    }
}

/// The lease a new incarnation writes over `old` (one compare-and-swap): committed entries are
/// kept, to be deleted when their messages come back; aborted ones are dropped. Call only when
/// [`can_rejoin`] holds. The returned keys tell the new incarnation which staged outputs to make
/// visible (commit is idempotent, and the old incarnation may have died before doing it).
pub fn rejoin(
    checkpoint: &Checkpoint,
    old: &Lease,
    incarnation: Incarnation,
    now_ms: i64,
) -> (Lease, Vec<EpochKey>) {
    let mut lease = Lease::new(&old.holder, incarnation, now_ms, old.lease_duration_seconds);
    let mut inherited = Vec::new();
    for ((inc, epoch), set) in &old.ids {
        if fate(checkpoint, old, *inc, *epoch) == Fate::Committed {
            lease.ids.insert((*inc, *epoch), set.clone());
            inherited.push(EpochKey { pod: old.holder.clone(), incarnation: *inc, epoch: *epoch });
        }
    }
    (lease, inherited)
}

/// Ids of all entries of `lease` that are committed in `checkpoint`.
pub fn committed_ids(checkpoint: &Checkpoint, lease: &Lease) -> IdSet {
    lease
        .ids
        .iter()
        .filter(|((inc, epoch), _)| fate(checkpoint, lease, *inc, *epoch) == Fate::Committed)
        .flat_map(|(_, set)| set.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::checkpoint_data::Member;
    use super::*;

    const A: Incarnation = Incarnation(1);
    const OLD: Incarnation = Incarnation(0);

    fn checkpoint(committed: Epoch, fenced: Option<Epoch>) -> Checkpoint {
        let mut cp = Checkpoint::initial(0);
        cp.open = committed + 2;
        cp.committed = committed;
        cp.members.insert("r".into(), Member { incarnation: A, admitted: 1, fenced });
        cp
    }

    fn lease() -> Lease {
        let mut lease = Lease::new("r", A, 0, 10);
        lease.acked_epoch = 3;
        lease.ids.insert((A, 2), ["x".to_string()].into());
        lease.ids.insert((A, 3), ["y".to_string()].into());
        lease.ids.insert((OLD, 5), ["z".to_string()].into());
        lease
    }

    #[test]
    fn live_member_epochs_commit_up_to_c() {
        let (cp, l) = (checkpoint(2, None), lease());
        assert_eq!(fate(&cp, &l, A, 2), Fate::Committed);
        assert_eq!(fate(&cp, &l, A, 3), Fate::Undecided);
        assert_eq!(fate(&cp, &l, OLD, 5), Fate::Committed);
    }

    #[test]
    fn fenced_member_keeps_what_was_committed_before_the_fence() {
        let (cp, l) = (checkpoint(3, Some(2)), lease());
        assert_eq!(fate(&cp, &l, A, 2), Fate::Committed);
        assert_eq!(fate(&cp, &l, A, 3), Fate::Aborted);
    }

    #[test]
    fn unknown_membership_is_undecided() {
        let mut cp = checkpoint(3, None);
        cp.members.get_mut("r").unwrap().incarnation = Incarnation(7);
        assert_eq!(fate(&cp, &lease(), A, 2), Fate::Undecided);
        cp.members.clear();
        assert_eq!(fate(&cp, &lease(), A, 2), Fate::Undecided);
    }

    #[test]
    fn redelivered_messages_are_classified() {
        let cp = checkpoint(2, None);
        let l = lease();
        let key = |inc, epoch| EpochKey { pod: "r".into(), incarnation: inc, epoch };
        assert_eq!(classify("x", &cp, [&l]), Redelivery::Committed(key(A, 2)));
        assert_eq!(classify("z", &cp, [&l]), Redelivery::Committed(key(OLD, 5)));
        assert_eq!(classify("y", &cp, [&l]), Redelivery::Undecided);
        assert_eq!(classify("w", &cp, [&l]), Redelivery::Fresh);
        let fenced = checkpoint(3, Some(2));
        assert_eq!(classify("y", &fenced, [&l]), Redelivery::Fresh);
    }

    #[test]
    fn rejoin_waits_for_the_fence_and_keeps_committed_entries() {
        let l = lease();
        assert!(!can_rejoin(&checkpoint(2, None), &l));
        let cp = checkpoint(3, Some(2));
        assert!(can_rejoin(&cp, &l));
        let (new, inherited) = rejoin(&cp, &l, Incarnation(2), 50);
        assert_eq!(new.incarnation, Incarnation(2));
        assert_eq!(new.acked_epoch, 0);
        assert_eq!(new.ids.keys().copied().collect::<Vec<_>>(), [(OLD, 5), (A, 2)]);
        assert_eq!(inherited.len(), 2);
        assert_eq!(committed_ids(&cp, &new), ["x".to_string(), "z".to_string()].into());
    }

    #[test]
    fn a_never_admitted_lease_can_rejoin_at_once() {
        let mut cp = checkpoint(0, None);
        cp.members.clear();
        assert!(can_rejoin(&cp, &lease()));
    }
}
