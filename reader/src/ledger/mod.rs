//! The ledger: every message this reader holds, its receipt handle, its epoch, and what may
//! happen to it next.
//!
//! Why the receipt handle lives only here: deleting is the one irreversible step, and the ledger
//! is where the rule "delete only what is safe" is enforced (a `DeletePolicy`). Sinks see records
//! without handles; the pipeline reports outcomes; the ledger answers with the receipts to
//! delete, to release, or to extend. It does no I/O, so every rule is tested without a network.

mod policy;
mod seen;

use std::collections::HashMap;
use std::time::{Duration, Instant};

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

struct Entry {
    receipt: Receipt,
    epoch: u64,
    state: State,
    /// When SQS will make the message visible again unless we extend it.
    visible_until: Instant,
    visibility: Duration,
}

/// What `admit` tells the poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub ticket: Ticket,
    pub epoch: u64,
    /// This reader received the same message id before.
    pub redelivered: bool,
}

pub struct Ledger {
    policy: DeletePolicy,
    entries: HashMap<Ticket, Entry>,
    next_ticket: Ticket,
    epoch: u64,
    committed: Option<u64>,
    seen: SeenIds,
}

impl Ledger {
    pub fn new(policy: DeletePolicy) -> Self {
        Self {
            policy,
            entries: HashMap::new(),
            next_ticket: 1,
            epoch: 0,
            committed: None,
            seen: SeenIds::new(SEEN_CAPACITY),
        }
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
        now: Instant,
        visibility: Duration,
    ) -> Admitted {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let redelivered = self.seen.insert(message_id);
        let entry = Entry {
            receipt: Receipt { queue, handle },
            epoch: self.epoch,
            state: State::InWork,
            visible_until: now + visibility,
            visibility,
        };
        self.entries.insert(ticket, entry);
        Admitted { ticket, epoch: self.epoch, redelivered }
    }

    /// The sinks acknowledged (or the dead-letter sink took it). `Some` when it may be deleted now;
    /// `None` when the policy holds it for its epoch's commit (or the ticket is unknown).
    pub fn acked(&mut self, ticket: Ticket) -> Option<Receipt> {
        let committed = self.committed;
        let policy = self.policy;
        let entry = self.entries.get_mut(&ticket).filter(|e| e.state == State::InWork)?;
        if policy.allows(entry.epoch, committed) {
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

    /// The epoch new messages are tagged with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn committed(&self) -> Option<u64> {
        self.committed
    }

    /// Start tagging new messages with the next epoch; returns it.
    pub fn open_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// Every message of epochs up to `epoch` is settled (acknowledged, released or gone).
    pub fn epoch_settled(&self, epoch: u64) -> bool {
        !self.entries.values().any(|e| e.epoch <= epoch && e.state == State::InWork)
    }

    /// Epochs up to `epoch` are committed: the held receipts among them may be deleted now.
    pub fn commit(&mut self, epoch: u64) -> Vec<(Ticket, Receipt)> {
        self.committed = Some(self.committed.map_or(epoch, |c| c.max(epoch)));
        let mut due = Vec::new();
        for (ticket, e) in &mut self.entries {
            if e.state == State::Held && e.epoch <= epoch {
                e.state = State::Deleting;
                due.push((*ticket, e.receipt.clone()));
            }
        }
        due
    }

    /// Shutting down (or stopping): everything not yet acknowledged goes back to the queue, and so
    /// does what is held for an epoch that will not commit here.
    pub fn release_all(&mut self) -> Vec<(Ticket, Receipt)> {
        let mut due = Vec::new();
        for (ticket, e) in &mut self.entries {
            if matches!(e.state, State::InWork | State::Held) {
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

    fn admit(ledger: &mut Ledger, id: &str, now: Instant) -> Ticket {
        ledger.admit(0, id, format!("rh-{id}"), now, VIS).ticket
    }

    #[test]
    fn at_least_once_deletes_on_ack() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let t = admit(&mut ledger, "a", Instant::now());
        assert_eq!(ledger.acked(t), Some(Receipt { queue: 0, handle: "rh-a".into() }));
        assert_eq!(ledger.acked(t), None, "a second ack deletes nothing more");
        assert_eq!(ledger.release(t), None, "an acknowledged message is never released");
        ledger.forget(t);
        assert!(ledger.is_empty());
    }

    #[test]
    fn exactly_once_holds_until_the_epoch_commits() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let a = admit(&mut ledger, "a", now);
        assert_eq!(ledger.open_epoch(), 1);
        let b = ledger.admit(0, "b", "rh-b".into(), now, VIS);
        assert_eq!(b.epoch, 1);
        assert!(!ledger.epoch_settled(0));
        assert_eq!(ledger.acked(a), None, "held for epoch 0");
        assert!(ledger.epoch_settled(0));
        assert_eq!(ledger.acked(b.ticket), None);
        let due = ledger.commit(0);
        assert_eq!(due, vec![(a, Receipt { queue: 0, handle: "rh-a".into() })]);
        assert_eq!(ledger.committed(), Some(0));
        assert!(ledger.commit(0).is_empty(), "a commit deletes each receipt once");
        assert_eq!(ledger.commit(1).len(), 1);
    }

    #[test]
    fn late_acks_after_a_commit_delete_at_once() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let a = admit(&mut ledger, "a", Instant::now());
        ledger.commit(0);
        assert!(ledger.acked(a).is_some());
    }

    #[test]
    fn release_returns_unacknowledged_work_only() {
        let mut ledger = Ledger::new(DeletePolicy::OnCommit);
        let now = Instant::now();
        let (a, b, c) =
            (admit(&mut ledger, "a", now), admit(&mut ledger, "b", now), admit(&mut ledger, "c", now));
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
    fn heartbeat_extends_at_half_the_timeout() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let start = Instant::now();
        let a = admit(&mut ledger, "a", start);
        let b = admit(&mut ledger, "b", start);
        assert!(ledger.due_for_extension(start + Duration::from_secs(14)).is_empty());
        ledger.release(b);
        let due = ledger.due_for_extension(start + Duration::from_secs(15));
        assert_eq!(due.iter().map(|(t, _, v)| (*t, *v)).collect::<Vec<_>>(), vec![(a, VIS)]);
        ledger.extended(a, start + Duration::from_secs(15));
        assert!(ledger.due_for_extension(start + Duration::from_secs(29)).is_empty());
        assert_eq!(ledger.due_for_extension(start + Duration::from_secs(30)).len(), 1);
    }

    #[test]
    fn redeliveries_are_noticed() {
        let mut ledger = Ledger::new(DeletePolicy::OnAck);
        let now = Instant::now();
        assert!(!ledger.admit(0, "a", "h1".into(), now, VIS).redelivered);
        assert!(ledger.admit(0, "a", "h2".into(), now, VIS).redelivered);
    }
}
