//! The operator's side of the protocol as a pure function: from the checkpoint ConfigMap, what it
//! reads of every lease, and the clock, the next checkpoint and the reasons for the change.
//!
//! Why pure and stateless: everything the coordinator knows is in ConfigMaps, so an operator
//! restart loses nothing, and the same function runs in the operator, in a standalone reader and
//! inside the model check. The caller writes the returned checkpoint with a compare-and-swap on
//! the resourceVersion it read, and calls again on conflict.
//!
//! One step, in this order:
//! 1. members: a member whose lease is gone is removed; one whose lease expired, or whose pod now
//!    runs another incarnation, is fenced at the current committed epoch; a fenced member whose pod
//!    rejoined with a new incarnation is replaced by it.
//! 2. admission: a pod with a live lease and no member is admitted at the open epoch.
//! 3. commit: while the oldest uncommitted epoch `C+1` is closed (`C+1 < E`), it commits once every
//!    live member admitted at or before it has acked it. A barrier with no live member commits
//!    too: nobody can finalize that epoch (fenced members only finalize what was committed before
//!    their fence), so an empty commit only lets the counters move on after a scale to zero.
//! 4. open: `E+1` opens when the interval has elapsed, `E-1` is committed (at most one closed,
//!    uncommitted epoch at a time, which bounds the ids a lease holds) and some member is live
//!    (with no readers, epochs stand still instead of churning the ConfigMap).

use super::checkpoint_data::{Checkpoint, Member};
use super::lease_data::Lease;
use super::types::{Epoch, Incarnation};

/// What the coordinator needs of one lease ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseView {
    pub pod: String,
    pub incarnation: Incarnation,
    pub acked_epoch: Epoch,
    /// Expired on the operator's clock, allowing for skew (see [`Lease::is_expired`]).
    pub expired: bool,
}

impl LeaseView {
    pub fn of(lease: &Lease, now_ms: i64, skew_ms: i64) -> Self {
        LeaseView {
            pod: lease.holder.clone(),
            incarnation: lease.incarnation,
            acked_epoch: lease.acked_epoch,
            expired: lease.is_expired(now_ms, skew_ms),
        }
    }
}

/// The operator's clock and the source's checkpoint interval.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now_ms: i64,
    pub interval_ms: i64,
}

/// One change the step made; the operator turns these into events, metrics and status.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Fence {
        pod: String,
        incarnation: Incarnation,
        committed_through: Epoch,
    },
    Admit {
        pod: String,
        incarnation: Incarnation,
        admitted: Epoch,
    },
    Remove {
        pod: String,
        incarnation: Incarnation,
    },
    /// `barrier`: the live members whose acks the commit rests on.
    Commit {
        epoch: Epoch,
        barrier: Vec<(String, Incarnation)>,
    },
    Open {
        epoch: Epoch,
        at_ms: i64,
    },
}

/// The next checkpoint and what changed. An empty `actions` means: write nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub checkpoint: Checkpoint,
    pub actions: Vec<Action>,
}

/// One coordinator step (see the module docs for the rules and their order).
pub fn step(current: &Checkpoint, leases: &[LeaseView], clock: Clock) -> Step {
    let mut cp = current.clone();
    let mut actions = Vec::new();
    let lease_of = |pod: &str| leases.iter().find(|l| l.pod == pod);

    // 1. Members.
    let pods: Vec<String> = cp.members.keys().cloned().collect();
    for pod in pods {
        let member = cp.members[&pod].clone();
        match lease_of(&pod) {
            None => {
                cp.members.remove(&pod);
                actions.push(Action::Remove { pod, incarnation: member.incarnation });
            }
            Some(lease) if member.fenced.is_none() => {
                if lease.expired || lease.incarnation != member.incarnation {
                    fence(&mut cp, &pod, &member, &mut actions);
                }
            }
            Some(lease) => {
                if lease.incarnation != member.incarnation && !lease.expired {
                    admit(&mut cp, lease, &mut actions);
                }
            }
        }
    }

    // 2. Admission.
    for lease in leases {
        if !lease.expired && !cp.members.contains_key(&lease.pod) {
            admit(&mut cp, lease, &mut actions);
        }
    }

    // 3. Commit.
    while cp.committed + 1 < cp.open {
        let epoch = cp.committed + 1;
        let barrier: Vec<(String, Incarnation)> = cp
            .live_members()
            .filter(|(_, m)| m.admitted <= epoch)
            .map(|(pod, m)| (pod.clone(), m.incarnation))
            .collect();
        let all_acked = barrier.iter().all(|(pod, inc)| {
            lease_of(pod).is_some_and(|l| l.incarnation == *inc && !l.expired && l.acked_epoch >= epoch)
        });
        if !all_acked {
            break;
        }
        cp.committed = epoch;
        actions.push(Action::Commit { epoch, barrier });
    }

    // 4. Open.
    let elapsed = clock.now_ms >= cp.opened_at_ms.saturating_add(clock.interval_ms);
    if elapsed && cp.committed + 1 == cp.open && cp.live_members().next().is_some() {
        cp.open += 1;
        cp.opened_at_ms = clock.now_ms;
        actions.push(Action::Open { epoch: cp.open, at_ms: clock.now_ms });
    }

    Step { checkpoint: cp, actions }
}

/// Live members that have not acked the oldest uncommitted, closed epoch: who the barrier waits
/// for (status and the CheckpointHealthy condition). Empty when no epoch is closed.
pub fn waiting_for(cp: &Checkpoint, leases: &[LeaseView]) -> Vec<String> {
    let epoch = cp.committed + 1;
    if epoch >= cp.open {
        return Vec::new();
    }
    cp.live_members()
        .filter(|(_, m)| m.admitted <= epoch)
        .filter(|(pod, m)| {
            !leases.iter().any(|l| &l.pod == *pod && l.incarnation == m.incarnation && l.acked_epoch >= epoch)
        })
        .map(|(pod, _)| pod.clone())
        .collect()
}

fn fence(cp: &mut Checkpoint, pod: &str, member: &Member, actions: &mut Vec<Action>) {
    let committed_through = cp.committed;
    if let Some(m) = cp.members.get_mut(pod) {
        m.fenced = Some(committed_through);
    }
    actions.push(Action::Fence { pod: pod.to_owned(), incarnation: member.incarnation, committed_through });
}

fn admit(cp: &mut Checkpoint, lease: &LeaseView, actions: &mut Vec<Action>) {
    let admitted = cp.open;
    cp.members.insert(lease.pod.clone(), Member { incarnation: lease.incarnation, admitted, fenced: None });
    actions.push(Action::Admit { pod: lease.pod.clone(), incarnation: lease.incarnation, admitted });
}

#[cfg(test)]
mod tests {
    use super::*;

    const I1: Incarnation = Incarnation(1);
    const I2: Incarnation = Incarnation(2);
    const CLOCK: Clock = Clock { now_ms: 10_000, interval_ms: 5_000 };
    const EARLY: Clock = Clock { now_ms: 1_000, interval_ms: 5_000 };

    fn view(pod: &str, incarnation: Incarnation, acked_epoch: Epoch, expired: bool) -> LeaseView {
        LeaseView { pod: pod.into(), incarnation, acked_epoch, expired }
    }

    fn with_members(open: Epoch, committed: Epoch, members: &[(&str, Incarnation, Epoch)]) -> Checkpoint {
        let mut cp = Checkpoint::initial(0);
        cp.open = open;
        cp.committed = committed;
        for (pod, inc, admitted) in members {
            cp.members
                .insert(pod.to_string(), Member { incarnation: *inc, admitted: *admitted, fenced: None });
        }
        cp
    }

    #[test]
    fn nothing_changes_before_the_interval_without_acks() {
        let cp = with_members(2, 0, &[("a", I1, 1)]);
        let s = step(&cp, &[view("a", I1, 0, false)], EARLY);
        assert!(s.actions.is_empty());
        assert_eq!(s.checkpoint, cp);
    }

    #[test]
    fn a_new_reader_is_admitted_at_the_open_epoch_and_the_next_epoch_opens() {
        let cp = Checkpoint::initial(0);
        let s = step(&cp, &[view("a", I1, 0, false)], CLOCK);
        assert_eq!(
            s.actions,
            [
                Action::Admit { pod: "a".into(), incarnation: I1, admitted: 1 },
                Action::Open { epoch: 2, at_ms: 10_000 },
            ]
        );
        assert_eq!(s.checkpoint.open, 2);
        assert_eq!(s.checkpoint.opened_at_ms, 10_000);
    }

    #[test]
    fn no_epoch_opens_without_live_readers() {
        let s = step(&Checkpoint::initial(0), &[], CLOCK);
        assert!(s.actions.is_empty());
    }

    #[test]
    fn commit_waits_for_every_live_member() {
        let cp = with_members(2, 0, &[("a", I1, 1), ("b", I2, 1)]);
        let s = step(&cp, &[view("a", I1, 1, false), view("b", I2, 0, false)], EARLY);
        assert!(s.actions.is_empty());
        assert_eq!(waiting_for(&cp, &[view("a", I1, 1, false), view("b", I2, 0, false)]), ["b"]);

        let s = step(&cp, &[view("a", I1, 1, false), view("b", I2, 1, false)], EARLY);
        assert_eq!(
            s.actions,
            [Action::Commit { epoch: 1, barrier: vec![("a".into(), I1), ("b".into(), I2)] }]
        );
        assert_eq!(s.checkpoint.committed, 1);
    }

    #[test]
    fn a_reader_admitted_after_an_epoch_is_not_in_its_barrier() {
        let cp = with_members(3, 1, &[("a", I1, 1), ("b", I2, 3)]);
        let s = step(&cp, &[view("a", I1, 2, false), view("b", I2, 0, false)], EARLY);
        assert_eq!(s.checkpoint.committed, 2);
    }

    #[test]
    fn an_expired_reader_is_fenced_and_left_out_of_the_barrier() {
        let cp = with_members(3, 1, &[("a", I1, 1), ("b", I2, 1)]);
        let s = step(&cp, &[view("a", I1, 2, false), view("b", I2, 2, true)], EARLY);
        assert_eq!(
            s.actions,
            [
                Action::Fence { pod: "b".into(), incarnation: I2, committed_through: 1 },
                Action::Commit { epoch: 2, barrier: vec![("a".into(), I1)] },
            ]
        );
        assert_eq!(s.checkpoint.members["b"].fenced, Some(1));
    }

    #[test]
    fn the_ack_of_an_expired_lease_never_commits() {
        let cp = with_members(2, 0, &[("a", I1, 1)]);
        let s = step(&cp, &[view("a", I1, 1, true)], EARLY);
        assert_eq!(s.checkpoint.members["a"].fenced, Some(0));
        // The barrier is empty, so epoch 1 commits, but for nobody: "a" is fenced through 0.
        assert_eq!(s.checkpoint.committed, 1);
        assert!(matches!(&s.actions[1], Action::Commit { barrier, .. } if barrier.is_empty()));
    }

    #[test]
    fn a_restarted_pod_is_fenced_then_replaced() {
        let cp = with_members(3, 1, &[("a", I1, 1)]);
        // The pod runs a new incarnation while the old member is still live: fence first.
        let s = step(&cp, &[view("a", I2, 0, false)], EARLY);
        assert_eq!(s.checkpoint.members["a"].fenced, Some(1));
        assert_eq!(s.checkpoint.members["a"].incarnation, I1);
        // Next step: the fenced member is replaced by the new incarnation.
        let s = step(&s.checkpoint, &[view("a", I2, 0, false)], EARLY);
        assert_eq!(s.checkpoint.members["a"], Member { incarnation: I2, admitted: 3, fenced: None });
    }

    #[test]
    fn a_member_whose_lease_is_gone_is_removed() {
        let cp = with_members(2, 1, &[("a", I1, 1)]);
        let s = step(&cp, &[], CLOCK);
        assert_eq!(s.actions, [Action::Remove { pod: "a".into(), incarnation: I1 }]);
        assert!(s.checkpoint.members.is_empty());
    }

    #[test]
    fn the_next_epoch_waits_for_the_closed_one_to_commit() {
        let cp = with_members(3, 1, &[("a", I1, 1)]);
        let s = step(&cp, &[view("a", I1, 1, false)], CLOCK);
        assert!(s.actions.is_empty(), "{:?}", s.actions);
        let s = step(&cp, &[view("a", I1, 2, false)], CLOCK);
        assert_eq!(s.checkpoint.committed, 2);
        assert_eq!(s.checkpoint.open, 4);
    }

    #[test]
    fn lease_views_come_from_leases() {
        let lease = Lease::new("a", I1, 0, 10);
        assert!(!LeaseView::of(&lease, 10_500, 1_000).expired);
        assert!(LeaseView::of(&lease, 11_000, 1_000).expired);
    }
}
