//! The ledger: every message this reader holds, its receipt handle, its epoch, and what may
//! happen to it next.
//!
//! Why the receipt handle lives only here: deleting is the one irreversible step, and the ledger
//! is where the rule "delete only what is safe" is enforced (a `DeletePolicy`). Sinks see records
//! without handles; the pipeline reports outcomes; the ledger answers with the receipts to
//! delete, to release, or to extend. It does no I/O, so every rule is tested without a network.

mod backoff;
mod policy;
mod seen;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

pub use backoff::{LONGEST_REDELIVERY_DELAY, redelivery_delay};
pub use policy::DeletePolicy;
pub use seen::SeenIds;

/// Identifies one received message (a redelivery gets a new ticket).
pub type Ticket = u64;

/// How many recent message ids are remembered to count redeliveries.
const SEEN_CAPACITY: usize = 200_000;

/// What SQS needs to act on a message: which queue, and the handle of this receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub queue: usize,
    pub handle: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Received, not yet settled by the sinks.
    InWork,
    /// Acknowledged, waiting for its epoch to commit (exactly-once).
    Held,
    /// Handed to the acker for DeleteMessageBatch.
    Deleting,
    /// Handed to the acker for visibility 0.
    Releasing,
}

impl State {
    /// Not yet handed to the acker: what a commit, an abort or the drain may still decide.
    fn is_unsettled(self) -> bool {
        matches!(self, State::InWork | State::Held)
    }
}

/// The epoch a message belongs to and the reader incarnation that tagged it. Under
/// at-least-once every message has `Tag::NONE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tag {
    pub incarnation: u64,
    pub epoch: u64,
}

impl Tag {
    pub const NONE: Tag = Tag { incarnation: 0, epoch: 0 };
}

struct Entry {
    receipt: Receipt,
    message_id: String,
    tag: Tag,
    state: State,
    /// When SQS will make the message visible again unless we extend it.
    visible_until: Instant,
    visibility: Duration,
}

/// What `admit` tells the poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub ticket: Ticket,
    /// This reader received the same message id before.
    pub redelivered: bool,
}

pub struct Ledger {
    policy: DeletePolicy,
    entries: HashMap<Ticket, Entry>,
    next_ticket: Ticket,
    seen: SeenIds,
}

impl Ledger {
    pub fn new(policy: DeletePolicy) -> Self {
        Self { policy, entries: HashMap::new(), next_ticket: 1, seen: SeenIds::new(SEEN_CAPACITY) }
    }

    pub fn policy(&self) -> DeletePolicy {
        self.policy
    }

    /// Record a received message; it is in work from now, invisible for `visibility`.
    pub fn admit(
        &mut self,
        queue: usize,
        message_id: &str,
        handle: String,
        tag: Tag,
        now: Instant,
        visibility: Duration,
    ) -> Admitted {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let redelivered = self.seen.insert(message_id);
        let entry = Entry {
            receipt: Receipt { queue, handle },
            message_id: message_id.to_owned(),
            tag,
            state: State::InWork,
            visible_until: now + visibility,
            visibility,
        };
        self.entries.insert(ticket, entry);
        Admitted { ticket, redelivered }
    }

    /// The sinks acknowledged (or the dead-letter sink took it). `Some` when it may be deleted now;
    /// `None` when the policy holds it for its epoch's commit (or the ticket is unknown).
    pub fn acked(&mut self, ticket: Ticket) -> Option<Receipt> {
        let policy = self.policy;
        let entry = self.entries.get_mut(&ticket).filter(|e| e.state == State::InWork)?;
        if policy.deletes_on_ack() {
            entry.state = State::Deleting;
            Some(entry.receipt.clone())
        } else {
            entry.state = State::Held;
            None
        }
    }

    /// Give the message back to the queue (not delivered). Only messages not yet acknowledged can
    /// be released: an acknowledged one is deleted or held, never redelivered on purpose.
    pub fn release(&mut self, ticket: Ticket) -> Option<Receipt> {
        let entry = self.entries.get_mut(&ticket).filter(|e| e.state == State::InWork)?;
        entry.state = State::Releasing;
        Some(entry.receipt.clone())
    }

    /// Delete this message now whatever its state short of deleting or releasing (a redelivery of
    /// a message some epoch already committed).
    pub fn take_for_delete(&mut self, ticket: Ticket) -> Option<Receipt> {
        let entry = self.entries.get_mut(&ticket).filter(|e| e.state.is_unsettled())?;
        entry.state = State::Deleting;
        Some(entry.receipt.clone())
    }

    /// `tag`'s epoch is committed: its held messages among `ids` are to be deleted now. Answers
    /// (ticket, receipt, message id) for each.
    pub fn commit(&mut self, tag: Tag, ids: &BTreeSet<String>) -> Vec<(Ticket, Receipt, String)> {
        let mut due = Vec::new();
        for (ticket, e) in &mut self.entries {
            if e.state == State::Held && e.tag == tag && ids.contains(&e.message_id) {
                e.state = State::Deleting;
                due.push((*ticket, e.receipt.clone(), e.message_id.clone()));
            }
        }
        due
    }

    /// `tag`'s epoch will never commit here (aborted): its messages, held or still in work, go back
    /// to the queue.
    pub fn abort(&mut self, tag: Tag) -> Vec<(Ticket, Receipt)> {
        let mut due = Vec::new();
        for (ticket, e) in &mut self.entries {
            if e.tag == tag && e.state.is_unsettled() {
                e.state = State::Releasing;
                due.push((*ticket, e.receipt.clone()));
            }
        }
        due
    }

    /// The acker is done with the message (deleted, released, or given up): drop it.
    pub fn forget(&mut self, ticket: Ticket) {
        self.entries.remove(&ticket);
    }

    /// Messages still ours whose visibility has half run out, with the timeout to extend them by.
    pub fn due_for_extension(&self, now: Instant) -> Vec<(Ticket, Receipt, Duration)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.state != State::Releasing)
            .filter(|(_, e)| e.visible_until.saturating_duration_since(now) <= e.visibility / 2)
            .map(|(t, e)| (*t, e.receipt.clone(), e.visibility))
            .collect()
    }

    /// SQS accepted a visibility extension made at `now`.
    pub fn extended(&mut self, ticket: Ticket, now: Instant) {
        if let Some(e) = self.entries.get_mut(&ticket) {
            e.visible_until = now + e.visibility;
        }
    }

    /// Until when every message still ours is invisible to other readers, as far as this ledger
    /// knows (`None`: it holds nothing). The reader's lease must not outlast it.
    pub fn covered_until(&self) -> Option<Instant> {
        self.entries.values().filter(|e| e.state != State::Releasing).map(|e| e.visible_until).min()
    }

    /// Shutting down (or stopping): everything not yet acknowledged goes back to the queue, and so
    /// does what is held for an epoch that will not commit here.
    pub fn release_all(&mut self) -> Vec<(Ticket, Receipt)> {
        let mut due = Vec::new();
        for (ticket, e) in &mut self.entries {
            if e.state.is_unsettled() {
                e.state = State::Releasing;
                due.push((*ticket, e.receipt.clone()));
            }
        }
        due
    }

    /// Messages held by this reader in any state.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Messages not yet settled by the sinks.
    pub fn in_work(&self) -> usize {
        self.entries.values().filter(|e| e.state == State::InWork).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIS: Duration = Duration::from_secs(30);
    const E1: Tag = Tag { incarnation: 7, epoch: 1 };
    const E2: Tag = Tag { incarnation: 7, epoch: 2 };

    fn admit(ledger: &mut Ledger, id: &str, tag: Tag, now: Instant) -> Ticket {
        ledger.admit(0, id, format!("rh-{id}"), tag, now, VIS).ticket
    }

    fn ids(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn at_least_once_deletes_on_ack() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let t = admit(&mut ledger, "a", Tag::NONE, Instant::now());
        assert_eq!(ledger.acked(t), Some(Receipt { queue: 0, handle: "rh-a".into() }));
        assert_eq!(ledger.acked(t), None, "a second ack deletes nothing more");
        assert_eq!(ledger.release(t), None, "an acknowledged message is never released");
        ledger.forget(t);
        assert!(ledger.is_empty());
    }

    #[test]
    fn exactly_once_holds_until_the_epoch_commits_and_deletes_only_its_ids() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let a = admit(&mut ledger, "a", E1, now);
        let b = admit(&mut ledger, "b", E2, now);
        let c = admit(&mut ledger, "c", E1, now);
        assert_eq!(ledger.acked(a), None, "held for epoch 1");
        assert_eq!(ledger.acked(b), None);
        let due = ledger.commit(E1, &ids(&["a", "b", "c"]));
        assert_eq!(due, vec![(a, Receipt { queue: 0, handle: "rh-a".into() }, "a".to_owned())]);
        assert!(ledger.commit(E1, &ids(&["a"])).is_empty(), "a commit deletes each receipt once");
        assert_eq!(ledger.in_work(), 1, "c is still in work: not part of the commit");
        assert!(ledger.release(c).is_some());
        assert_eq!(ledger.commit(E2, &ids(&["b"])).len(), 1);
    }

    #[test]
    fn the_same_epoch_of_another_incarnation_is_another_tag() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let old = admit(&mut ledger, "a", Tag { incarnation: 1, epoch: 5 }, now);
        let new = admit(&mut ledger, "b", Tag { incarnation: 2, epoch: 5 }, now);
        ledger.acked(old);
        ledger.acked(new);
        let aborted = ledger.abort(Tag { incarnation: 1, epoch: 5 });
        assert_eq!(aborted.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![old]);
        assert_eq!(ledger.commit(Tag { incarnation: 2, epoch: 5 }, &ids(&["a", "b"])).len(), 1);
    }

    #[test]
    fn abort_releases_held_and_in_work_messages_of_the_epoch() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let (a, b, _c) = (
            admit(&mut ledger, "a", E1, now),
            admit(&mut ledger, "b", E1, now),
            admit(&mut ledger, "c", E2, now),
        );
        ledger.acked(a);
        let mut released: Vec<Ticket> = ledger.abort(E1).into_iter().map(|(t, _)| t).collect();
        released.sort();
        assert_eq!(released, vec![a, b]);
        assert_eq!(ledger.acked(b), None, "a late ack of a released message deletes nothing");
        assert!(ledger.abort(E1).is_empty());
    }

    #[test]
    fn release_returns_unacknowledged_work_only() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let (a, b, c) = (
            admit(&mut ledger, "a", E1, now),
            admit(&mut ledger, "b", E1, now),
            admit(&mut ledger, "c", E1, now),
        );
        assert!(ledger.release(a).is_some());
        assert_eq!(ledger.in_work(), 2);
        ledger.acked(b); // held
        let mut released: Vec<Ticket> = ledger.release_all().into_iter().map(|(t, _)| t).collect();
        released.sort();
        assert_eq!(
            released,
            vec![b, c],
            "held and in-work go back; the one already releasing is not repeated"
        );
        assert_eq!(ledger.len(), 3, "entries stay until the acker forgets them");
    }

    #[test]
    fn heartbeat_extends_at_half_the_timeout_and_reports_coverage() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let start = Instant::now();
        assert_eq!(ledger.covered_until(), None);
        let a = admit(&mut ledger, "a", Tag::NONE, start);
        let b = admit(&mut ledger, "b", Tag::NONE, start);
        assert!(ledger.due_for_extension(start + Duration::from_secs(14)).is_empty());
        ledger.release(b);
        let due = ledger.due_for_extension(start + Duration::from_secs(15));
        assert_eq!(due.iter().map(|(t, _, v)| (*t, *v)).collect::<Vec<_>>(), vec![(a, VIS)]);
        ledger.extended(a, start + Duration::from_secs(15));
        assert_eq!(ledger.covered_until(), Some(start + Duration::from_secs(45)));
        assert!(ledger.due_for_extension(start + Duration::from_secs(29)).is_empty());
        assert_eq!(ledger.due_for_extension(start + Duration::from_secs(30)).len(), 1);
    }

    #[test]
    fn a_committed_redelivery_is_deleted_from_any_live_state() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let a = admit(&mut ledger, "a", Tag::NONE, Instant::now());
        assert!(ledger.take_for_delete(a).is_some());
        assert!(ledger.take_for_delete(a).is_none(), "once");
        assert!(ledger.release(a).is_none());
    }

    #[test]
    fn redeliveries_are_noticed() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let now = Instant::now();
        assert!(!ledger.admit(0, "a", "h1".into(), Tag::NONE, now, VIS).redelivered);
        assert!(ledger.admit(0, "a", "h2".into(), Tag::NONE, now, VIS).redelivered);
    }
}
