//! A reader's side of the protocol as a pure state machine: the pipeline tells it what happened
//! (a checkpoint version was observed, a message was tagged or settled, a write or a delete
//! finished, the lease was lost) and it answers with the commands to carry out next.
//!
//! Why a state machine with explicit commands: the order "ack before commit, commit before delete,
//! forget only after a confirmed delete, never commit or delete after a fence" is the whole of
//! exactly-once, and it is easiest to check when no I/O is mixed in. The model check drives this
//! same type through crashes, pauses and lease expiry.
//!
//! Life of an epoch `e` of this incarnation:
//! `Open` (messages are tagged `e`) -> the checkpoint opens `e+1` and every message of `e` is
//! settled -> `PreCommitting` (sink pre-commit) -> `PreCommitted` -> `Acking` (the lease write of
//! `ackedEpoch` and `e`'s ids) -> `Acked` -> a checkpoint shows `C >= e` -> `Committing` (sink
//! commit) -> `Deleting` (delete the receipts) -> `Forgetting` (remove the ids from the lease)
//! once every delete is confirmed. Ids whose delete is not confirmed stay recorded (stage
//! `Undeleted`) and are deleted when their message comes back.
//!
//! Fencing: when a checkpoint marks this incarnation fenced through `t`, epochs after `t` are
//! aborted (staged output dropped, receipts released) and epochs up to `t` still finish, because
//! they were committed with this reader's ack. When the lease is lost before the operator says so
//! (renewal failed, or it ran out on our own clock), the reader stops tagging and acking and waits
//! for the fence, finishing only what it already knows to be committed. Then it asks to rejoin.

use std::collections::BTreeMap;

use super::checkpoint_data::Checkpoint;
use super::ids::IdSet;
use super::types::{Epoch, EpochKey, Incarnation};

/// Work for the pipeline. Each names the call that reports its completion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Make the epoch's delivered output durable but not visible; then [`ReaderEpochs::pre_committed`].
    PreCommit(Epoch),
    /// One compare-and-swap of the own lease: `ackedEpoch = through` and an id entry per listed
    /// epoch; then [`ReaderEpochs::ack_written`], or [`ReaderEpochs::lease_lost`] on conflict.
    WriteAck { through: Epoch, entries: Vec<(Epoch, IdSet)> },
    /// Make the output of `key` visible (idempotent); for an own epoch then
    /// [`ReaderEpochs::sink_committed`].
    Commit(EpochKey),
    /// Delete the receipts of these ids; then [`ReaderEpochs::deleted`] with the confirmed ones.
    Delete { epoch: Epoch, ids: IdSet },
    /// Remove the id entry `(incarnation, epoch)` from the own lease; then
    /// [`ReaderEpochs::forgotten`].
    Forget { incarnation: Incarnation, epoch: Epoch },
    /// Drop the epoch's staged output and release its receipts (visibility 0). No answer.
    Abort(Epoch),
    /// This incarnation is over: take the lease over with a new one (`fate::rejoin`).
    Rejoin,
}

/// Where one own epoch is (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    Open,
    PreCommitting,
    PreCommitted,
    Acking,
    Acked,
    Committing,
    Deleting,
    Undeleted,
    Forgetting,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EpochState {
    /// Tagged messages not yet settled by the sink.
    unsettled: u32,
    /// Delivered ids (acked with the epoch, deleted on commit).
    ids: IdSet,
    stage: Stage,
}

/// Standing of this incarnation towards the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Standing {
    /// Lease written, not yet admitted: receives nothing.
    Joining,
    /// Admitted: tags, acks, commits.
    Member,
    /// Lease lost on our side; the checkpoint does not show the fence yet.
    Suspended,
    /// Fenced through `t`: finishes epochs up to `t`, aborts the rest.
    Fenced(Epoch),
    /// Asked to rejoin; this value is done.
    Over,
}

/// The epochs of one reader incarnation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReaderEpochs {
    pod: String,
    incarnation: Incarnation,
    standing: Standing,
    draining: bool,
    /// Highest open epoch observed: what new messages are tagged with.
    open: Epoch,
    /// Highest epoch known committed for this incarnation.
    committed: Epoch,
    /// Highest epoch acked (written) or below admission.
    acked: Epoch,
    ack_in_flight: bool,
    epochs: BTreeMap<Epoch, EpochState>,
    /// Committed entries of earlier incarnations still recorded in the lease.
    inherited: BTreeMap<(Incarnation, Epoch), IdSet>,
}

impl ReaderEpochs {
    /// A fresh incarnation whose lease is written (or being written) and not yet admitted.
    pub fn new(pod: &str, incarnation: Incarnation) -> Self {
        ReaderEpochs {
            pod: pod.to_owned(),
            incarnation,
            standing: Standing::Joining,
            draining: false,
            open: 0,
            committed: 0,
            acked: 0,
            ack_in_flight: false,
            epochs: BTreeMap::new(),
            inherited: BTreeMap::new(),
        }
    }

    /// A new incarnation that took over a lease with `fate::rejoin`: it remembers the carried-over
    /// committed entries and makes their output visible (the previous life may have died first).
    pub fn rejoined(
        pod: &str,
        incarnation: Incarnation,
        inherited: &BTreeMap<(Incarnation, Epoch), IdSet>,
    ) -> (Self, Vec<Command>) {
        let mut me = Self::new(pod, incarnation);
        me.inherited = inherited.clone();
        let commands = inherited
            .keys()
            .map(|(inc, epoch)| {
                Command::Commit(EpochKey { pod: pod.to_owned(), incarnation: *inc, epoch: *epoch })
            })
            .collect();
        (me, commands)
    }

    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    pub fn standing(&self) -> Standing {
        self.standing
    }

    /// The output key of an own epoch.
    pub fn key(&self, epoch: Epoch) -> EpochKey {
        EpochKey { pod: self.pod.clone(), incarnation: self.incarnation, epoch }
    }

    /// Whether new messages may be received now.
    pub fn can_receive(&self) -> bool {
        self.standing == Standing::Member && !self.draining
    }

    /// Ids recorded or about to be: compare with [`super::ids::LEASE_ID_BUDGET`] before receiving.
    pub fn pending_ids(&self) -> usize {
        self.epochs.values().map(|e| e.ids.len() + e.unsettled as usize).sum::<usize>()
            + self.inherited.values().map(IdSet::len).sum::<usize>()
    }

    /// Epoch of the stage of each own epoch, for metrics and tests.
    pub fn stages(&self) -> Vec<(Epoch, Stage)> {
        self.epochs.iter().map(|(e, s)| (*e, s.stage)).collect()
    }

    /// The epoch a newly received (fresh) message belongs to, or `None` if it must not be received.
    pub fn tag(&mut self) -> Option<Epoch> {
        if !self.can_receive() {
            return None;
        }
        let state = self.epochs.entry(self.open).or_insert_with(|| EpochState {
            unsettled: 0,
            ids: IdSet::new(),
            stage: Stage::Open,
        });
        state.unsettled += 1;
        Some(self.open)
    }

    /// The sink settled a tagged message: `delivered` (or dead-lettered) joins the epoch's ids;
    /// otherwise it was released to the queue and takes no part.
    pub fn settled(&mut self, epoch: Epoch, id: &str, delivered: bool) -> Vec<Command> {
        if let Some(state) = self.epochs.get_mut(&epoch).filter(|s| s.stage == Stage::Open) {
            state.unsettled = state.unsettled.saturating_sub(1);
            if delivered {
                state.ids.insert(id.to_owned());
            }
        }
        self.drive()
    }

    /// A version of the checkpoint ConfigMap was observed (watch events may be late, never
    /// reordered).
    pub fn observe(&mut self, cp: &Checkpoint) -> Vec<Command> {
        match cp.members.get(&self.pod) {
            Some(m) if m.incarnation == self.incarnation => match m.fenced {
                None => {
                    if self.standing == Standing::Joining {
                        self.standing = Standing::Member;
                        self.acked = self.acked.max(m.admitted.saturating_sub(1));
                    }
                    self.open = self.open.max(cp.open);
                    self.committed = self.committed.max(cp.committed);
                }
                Some(through) => {
                    if !matches!(self.standing, Standing::Fenced(_) | Standing::Over) {
                        self.standing = Standing::Fenced(through);
                    }
                    self.committed = self.committed.max(through);
                }
            },
            // Admitted once and now gone or replaced: fenced through what we know is committed.
            _ if matches!(self.standing, Standing::Member | Standing::Suspended) => {
                self.standing = Standing::Fenced(self.committed);
            }
            _ => {}
        }
        self.drive()
    }

    /// Our lease renewal failed its compare-and-swap, or the lease ran out on our own clock.
    pub fn lease_lost(&mut self) -> Vec<Command> {
        self.ack_in_flight = false;
        for state in self.epochs.values_mut().filter(|s| s.stage == Stage::Acking) {
            state.stage = Stage::PreCommitted;
        }
        match self.standing {
            Standing::Member => self.standing = Standing::Suspended,
            Standing::Joining => {
                self.standing = Standing::Over;
                return vec![Command::Rejoin];
            }
            _ => {}
        }
        self.drive()
    }

    /// Stop receiving; the epochs already tagged still finish.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// True when draining and nothing of this incarnation is left to do: the reader may delete
    /// its lease and exit.
    pub fn drained(&self) -> bool {
        self.draining && self.epochs.is_empty() && self.inherited.is_empty()
    }

    pub fn pre_committed(&mut self, epoch: Epoch) -> Vec<Command> {
        self.advance(epoch, Stage::PreCommitting, Stage::PreCommitted);
        self.drive()
    }

    pub fn ack_written(&mut self, through: Epoch) -> Vec<Command> {
        self.ack_in_flight = false;
        self.acked = self.acked.max(through);
        for (_, state) in self.epochs.range_mut(..=through) {
            if state.stage == Stage::Acking {
                state.stage = Stage::Acked;
            }
        }
        self.drive()
    }

    pub fn sink_committed(&mut self, epoch: Epoch) -> Vec<Command> {
        let mut commands = Vec::new();
        if let Some(state) = self.epochs.get_mut(&epoch).filter(|s| s.stage == Stage::Committing) {
            state.stage = Stage::Deleting;
            commands.push(Command::Delete { epoch, ids: state.ids.clone() });
        }
        commands.extend(self.drive());
        commands
    }

    /// The deletes of `confirmed` ids of `epoch` took effect (the request was sent while our lease
    /// was valid, so the receipts were current). Unconfirmed ids stay recorded.
    pub fn deleted(&mut self, epoch: Epoch, confirmed: &IdSet) -> Vec<Command> {
        if let Some(state) =
            self.epochs.get_mut(&epoch).filter(|s| matches!(s.stage, Stage::Deleting | Stage::Undeleted))
        {
            state.ids.retain(|id| !confirmed.contains(id));
            state.stage = Stage::Undeleted;
        }
        self.drive()
    }

    /// A redelivered message recorded under `key` was deleted without delivery (its receipt was
    /// fresh): if the entry is ours, the id no longer needs recording.
    pub fn redelivered_deleted(&mut self, key: &EpochKey, id: &str) -> Vec<Command> {
        if key.pod == self.pod {
            if key.incarnation == self.incarnation {
                if let Some(state) = self
                    .epochs
                    .get_mut(&key.epoch)
                    .filter(|s| matches!(s.stage, Stage::Deleting | Stage::Undeleted))
                {
                    state.ids.remove(id);
                }
            } else if let Some(ids) = self.inherited.get_mut(&(key.incarnation, key.epoch)) {
                ids.remove(id);
                if ids.is_empty() {
                    self.inherited.remove(&(key.incarnation, key.epoch));
                    return vec![Command::Forget { incarnation: key.incarnation, epoch: key.epoch }];
                }
            }
        }
        self.drive()
    }

    pub fn forgotten(&mut self, incarnation: Incarnation, epoch: Epoch) -> Vec<Command> {
        if incarnation == self.incarnation
            && self.epochs.get(&epoch).is_some_and(|s| s.stage == Stage::Forgetting)
        {
            self.epochs.remove(&epoch);
        }
        self.drive()
    }

    fn advance(&mut self, epoch: Epoch, from: Stage, to: Stage) {
        if let Some(state) = self.epochs.get_mut(&epoch).filter(|s| s.stage == from) {
            state.stage = to;
        }
    }

    /// Moves every epoch as far as the current knowledge allows and returns the work to do.
    fn drive(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        if self.standing == Standing::Over {
            return out;
        }
        let fenced_through = match self.standing {
            Standing::Fenced(t) => Some(t),
            _ => None,
        };
        if let Some(t) = fenced_through {
            self.abort_after(t, &mut out);
        }
        if matches!(self.standing, Standing::Member | Standing::Suspended) {
            self.close(&mut out);
        }
        if self.standing == Standing::Member && !self.ack_in_flight {
            self.ack(&mut out);
        }
        self.commit(&mut out);
        self.forget(&mut out);
        // Rejoin once fenced and nothing is left in progress but ids awaiting redelivery (they
        // stay in the lease and the next incarnation inherits them), or epochs whose ids are all
        // deleted and whose forget is written or failed: a forget cannot be written once the
        // lease is lost, and waiting for it would keep the fenced incarnation from rejoining for
        // ever; its entry stays in the lease, and the next incarnation inherits and forgets it.
        if fenced_through.is_some()
            && self
                .epochs
                .values()
                .all(|s| (s.stage == Stage::Undeleted && !s.ids.is_empty()) || s.stage == Stage::Forgetting)
        {
            self.standing = Standing::Over;
            out.push(Command::Rejoin);
        }
        out
    }

    /// Abort what can never commit: the epochs after the fence that had not reached a commit.
    fn abort_after(&mut self, fenced_through: Epoch, out: &mut Vec<Command>) {
        let doomed: Vec<Epoch> = self
            .epochs
            .range(fenced_through + 1..)
            .filter(|(_, s)| s.stage < Stage::Committing)
            .map(|(e, _)| *e)
            .collect();
        for epoch in doomed {
            self.epochs.remove(&epoch);
            out.push(Command::Abort(epoch));
        }
    }

    /// Close: an epoch older than the open one whose messages are all settled.
    fn close(&mut self, out: &mut Vec<Command>) {
        for (epoch, state) in self.epochs.range_mut(..self.open) {
            if state.stage == Stage::Open && state.unsettled == 0 {
                if state.ids.is_empty() {
                    state.stage = Stage::PreCommitted;
                } else {
                    state.stage = Stage::PreCommitting;
                    out.push(Command::PreCommit(*epoch));
                }
            }
        }
    }

    /// Ack: the longest run of closed, pre-committed epochs after the last ack.
    fn ack(&mut self, out: &mut Vec<Command>) {
        let blocked =
            self.epochs.range(self.acked + 1..).find(|(_, s)| s.stage < Stage::PreCommitted).map(|(e, _)| *e);
        let through = blocked.unwrap_or(self.open).min(self.open) - 1;
        if through <= self.acked {
            return;
        }
        let mut entries = Vec::new();
        for (epoch, state) in self.epochs.range_mut(self.acked + 1..=through) {
            if state.stage == Stage::PreCommitted {
                state.stage = Stage::Acking;
                if !state.ids.is_empty() {
                    entries.push((*epoch, state.ids.clone()));
                }
            }
        }
        self.ack_in_flight = true;
        out.push(Command::WriteAck { through, entries });
    }

    /// Commit: closed epochs known committed. `committed` only rises from a version in which
    /// this incarnation was an unfenced member (or from its fence), so `C >= e` proves that our
    /// ack of `e` landed, even if its write reported an error or is still in flight.
    fn commit(&mut self, out: &mut Vec<Command>) {
        for (epoch, state) in self.epochs.range_mut(..=self.committed) {
            if matches!(state.stage, Stage::PreCommitted | Stage::Acking | Stage::Acked) {
                state.stage = Stage::Committing;
                out.push(Command::Commit(EpochKey {
                    pod: self.pod.clone(),
                    incarnation: self.incarnation,
                    epoch: *epoch,
                }));
            }
        }
    }

    /// Forget: every id of the epoch is confirmed deleted.
    fn forget(&mut self, out: &mut Vec<Command>) {
        for (epoch, state) in &mut self.epochs {
            if state.stage == Stage::Undeleted && state.ids.is_empty() {
                state.stage = Stage::Forgetting;
                out.push(Command::Forget { incarnation: self.incarnation, epoch: *epoch });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::checkpoint_data::Member;
    use super::*;

    const INC: Incarnation = Incarnation(7);

    fn cp(open: Epoch, committed: Epoch, fenced: Option<Epoch>) -> Checkpoint {
        let mut cp = Checkpoint::initial(0);
        cp.open = open;
        cp.committed = committed;
        cp.members.insert("r".into(), Member { incarnation: INC, admitted: 1, fenced });
        cp
    }

    fn ids(list: &[&str]) -> IdSet {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn key(epoch: Epoch) -> EpochKey {
        EpochKey { pod: "r".into(), incarnation: INC, epoch }
    }

    /// A member with messages "a" and "b" delivered in epoch 1 and epoch 2 just opened.
    fn closing() -> (ReaderEpochs, Vec<Command>) {
        let mut r = ReaderEpochs::new("r", INC);
        assert_eq!(r.tag(), None, "joining readers receive nothing");
        assert!(r.observe(&cp(1, 0, None)).is_empty());
        assert_eq!(r.tag(), Some(1));
        assert_eq!(r.tag(), Some(1));
        assert!(r.settled(1, "a", true).is_empty());
        assert!(r.settled(1, "b", true).is_empty());
        let cmds = r.observe(&cp(2, 0, None));
        (r, cmds)
    }

    #[test]
    fn the_happy_path_runs_in_order() {
        let (mut r, cmds) = closing();
        assert_eq!(cmds, [Command::PreCommit(1)]);
        assert_eq!(
            r.pre_committed(1),
            [Command::WriteAck { through: 1, entries: vec![(1, ids(&["a", "b"]))] }]
        );
        assert!(r.ack_written(1).is_empty());
        assert_eq!(r.observe(&cp(2, 1, None)), [Command::Commit(key(1))]);
        assert_eq!(r.sink_committed(1), [Command::Delete { epoch: 1, ids: ids(&["a", "b"]) }]);
        assert_eq!(r.deleted(1, &ids(&["a", "b"])), [Command::Forget { incarnation: INC, epoch: 1 }]);
        assert!(r.forgotten(INC, 1).is_empty());
        assert!(r.stages().is_empty());
    }

    #[test]
    fn an_epoch_closes_only_when_all_its_messages_are_settled() {
        let mut r = ReaderEpochs::new("r", INC);
        r.observe(&cp(1, 0, None));
        r.tag();
        r.tag();
        r.settled(1, "a", true);
        assert!(r.observe(&cp(2, 0, None)).is_empty());
        assert_eq!(r.tag(), Some(2), "new messages go to the open epoch");
        // A released message takes no part in the epoch.
        assert_eq!(r.settled(1, "b", false), [Command::PreCommit(1)]);
        assert_eq!(r.pre_committed(1), [Command::WriteAck { through: 1, entries: vec![(1, ids(&["a"]))] }]);
    }

    #[test]
    fn empty_epochs_are_acked_without_a_pre_commit() {
        let mut r = ReaderEpochs::new("r", INC);
        r.observe(&cp(1, 0, None));
        assert_eq!(r.observe(&cp(3, 0, None)), [Command::WriteAck { through: 2, entries: vec![] }]);
        // Only one ack write at a time.
        assert!(r.observe(&cp(4, 0, None)).is_empty());
        assert_eq!(r.ack_written(2), [Command::WriteAck { through: 3, entries: vec![] }]);
    }

    #[test]
    fn a_later_admission_skips_earlier_epochs() {
        let mut c = cp(5, 3, None);
        c.members.get_mut("r").unwrap().admitted = 5;
        let mut r = ReaderEpochs::new("r", INC);
        assert!(r.observe(&c).is_empty());
        c.open = 6;
        assert_eq!(r.observe(&c), [Command::WriteAck { through: 5, entries: vec![] }]);
    }

    #[test]
    fn nothing_is_committed_before_the_checkpoint_says_so() {
        let (mut r, _) = closing();
        r.pre_committed(1);
        r.ack_written(1);
        assert!(r.observe(&cp(2, 0, None)).is_empty());
    }

    #[test]
    fn a_commit_seen_while_the_ack_is_in_flight_proves_the_ack() {
        let (mut r, _) = closing();
        r.pre_committed(1);
        assert_eq!(r.observe(&cp(2, 1, None)), [Command::Commit(key(1))]);
    }

    #[test]
    fn fencing_aborts_uncommitted_epochs_and_finishes_committed_ones() {
        let (mut r, _) = closing();
        r.pre_committed(1);
        r.ack_written(1);
        assert_eq!(r.tag(), Some(2));
        r.settled(2, "c", true);
        // Fenced through 1: epoch 1 was committed with our ack, epoch 2 never will be.
        let mut c = cp(3, 1, Some(1));
        c.committed = 2;
        let cmds = r.observe(&c);
        assert_eq!(cmds, [Command::Abort(2), Command::Commit(key(1))]);
        assert_eq!(r.tag(), None);
        r.sink_committed(1);
        // Only "a" confirmed: "b" stays recorded for the next incarnation, which rejoins now.
        assert_eq!(r.deleted(1, &ids(&["a"])), [Command::Rejoin]);
        assert_eq!(r.standing(), Standing::Over);
    }

    #[test]
    fn a_forget_lost_with_the_lease_does_not_keep_the_fenced_reader_from_rejoining() {
        let (mut r, _) = closing();
        r.pre_committed(1);
        r.ack_written(1);
        assert_eq!(r.observe(&cp(2, 1, None)), [Command::Commit(key(1))]);
        r.sink_committed(1);
        assert_eq!(r.deleted(1, &ids(&["a", "b"])), [Command::Forget { incarnation: INC, epoch: 1 }]);
        // The forget's write failed (the API server was away): the lease counts as lost.
        assert!(r.lease_lost().is_empty());
        assert_eq!(r.observe(&cp(3, 1, Some(1))), [Command::Rejoin]);
        assert_eq!(r.standing(), Standing::Over);
    }

    #[test]
    fn a_fenced_reader_without_committed_work_rejoins_at_once() {
        let (mut r, _) = closing();
        assert_eq!(r.observe(&cp(2, 0, Some(0))), [Command::Abort(1), Command::Rejoin]);
    }

    #[test]
    fn a_lost_lease_stops_acks_and_waits_for_the_fence() {
        let (mut r, _) = closing();
        assert_eq!(r.pre_committed(1).len(), 1);
        assert!(r.lease_lost().is_empty());
        assert_eq!(r.standing(), Standing::Suspended);
        assert_eq!(r.tag(), None);
        // A commit seen from an unfenced version is still ours to finish.
        assert_eq!(r.observe(&cp(2, 1, None)), [Command::Commit(key(1))]);
    }

    #[test]
    fn a_lost_lease_without_a_commit_ends_in_abort() {
        let (mut r, _) = closing();
        r.pre_committed(1);
        r.lease_lost();
        assert_eq!(r.observe(&cp(2, 0, Some(0))), [Command::Abort(1), Command::Rejoin]);
    }

    #[test]
    fn disappearing_from_the_members_counts_as_a_fence() {
        let (mut r, _) = closing();
        let mut c = cp(2, 0, None);
        c.members.clear();
        assert_eq!(r.observe(&c), [Command::Abort(1), Command::Rejoin]);
    }

    #[test]
    fn a_joining_reader_that_loses_its_lease_rejoins() {
        let mut r = ReaderEpochs::new("r", INC);
        assert_eq!(r.lease_lost(), [Command::Rejoin]);
    }

    #[test]
    fn a_rejoined_reader_commits_and_forgets_inherited_entries() {
        let old = Incarnation(3);
        let inherited = BTreeMap::from([((old, 4), ids(&["x"]))]);
        let (mut r, cmds) = ReaderEpochs::rejoined("r", INC, &inherited);
        let old_key = EpochKey { pod: "r".into(), incarnation: old, epoch: 4 };
        assert_eq!(cmds, [Command::Commit(old_key.clone())]);
        assert_eq!(r.pending_ids(), 1);
        assert_eq!(r.redelivered_deleted(&old_key, "x"), [Command::Forget { incarnation: old, epoch: 4 }]);
        assert_eq!(r.pending_ids(), 0);
    }

    #[test]
    fn a_draining_reader_finishes_then_reports_drained() {
        let (mut r, _) = closing();
        r.drain();
        assert_eq!(r.tag(), None);
        assert!(!r.drained());
        r.pre_committed(1);
        r.ack_written(1);
        r.observe(&cp(2, 1, None));
        r.sink_committed(1);
        r.deleted(1, &ids(&["a", "b"]));
        r.forgotten(INC, 1);
        assert!(r.drained());
    }
}
