//! The one seam between the stages and the checkpoint protocol.
//!
//! Why a gate: under exactlyOnce every stage has a question for the protocol (may a poller
//! receive now; what is this received message, fresh or a redelivery of something already
//! acked; this tagged message is settled; the held messages are covered until then), and under
//! atLeastOnce none has. The stages ask a `Gate` and never know which guarantee answers:
//! [`Open`] here, or the exactly-once gate (`exactly_once::EpochGate`).
//!
//! Why decisions as values: the gate answers what should happen to each received message and
//! `settle` carries it out (`Pipeline::sort`), so the protocol's side never reaches into the
//! ledger or the acker; it sees only what it is told ([`Gate::settled`],
//! [`Gate::redelivery_deleted`]) and the steps of [`super::EpochSettle`].

use aws_sdk_sqs::types::Message;
use futures::future::BoxFuture;
use sluice_protocol::EpochKey;

use super::ledger::Tag;
use crate::aws::queue::Queue;

/// What to do with one received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Deliver it, tagged with `Tag` (`Tag::NONE` under atLeastOnce).
    Deliver(Tag),
    /// Hand it back to the queue at once (it may not be tagged now, or its FIFO group is held
    /// back).
    Release,
    /// Its output is already committed under this key: make sure that output is visible (commit
    /// is idempotent), delete the message without delivering it, and report the delete
    /// ([`Gate::redelivery_deleted`]).
    FinishCommitted(EpochKey),
    /// Its fate is not known yet: neither delivered, deleted nor released; it stays invisible
    /// until its visibility timeout runs out.
    LeaveInvisible,
}

pub trait Gate: Send + Sync {
    /// May a poller receive a batch of up to `batch` messages now? `false`: look again shortly.
    fn may_receive(&self, batch: usize) -> bool;

    /// Sort a received batch: one [`Decision`] per message, in order.
    fn sort<'a>(&'a self, queue: &'a Queue, messages: &'a [Message]) -> BoxFuture<'a, Vec<Decision>>;

    /// A message tagged `tag` (never [`Tag::NONE`]) is settled: delivered (or dead-lettered), or
    /// released to the queue.
    fn settled(&self, tag: Tag, message_id: &str, delivered: bool);

    /// A message sorted [`Decision::FinishCommitted`] under `key` was deleted, the delete sent at
    /// `sent_at_ms` (ms since the Unix epoch). `true`: the delete counts as confirmed.
    fn redelivery_deleted(&self, key: &EpochKey, message_id: &str, sent_at_ms: i64) -> bool;

    /// The heartbeat's figures after each beat: every held message is invisible to others until
    /// `covered_until_ms` (ms since the Unix epoch; `i64::MAX` when none is held), the drain rate
    /// in thousandths of a message per second, and the messages held.
    fn held(&self, covered_until_ms: i64, drain_millis_per_second: u64, in_flight: u64);
}

/// atLeastOnce: always open, nothing tagged (the heartbeat's drain rate reaches the reader's
/// report through `process::report` under either guarantee).
pub struct Open;

impl Gate for Open {
    fn may_receive(&self, _batch: usize) -> bool {
        true
    }

    fn sort<'a>(&'a self, _queue: &'a Queue, messages: &'a [Message]) -> BoxFuture<'a, Vec<Decision>> {
        let decisions = vec![Decision::Deliver(Tag::NONE); messages.len()];
        Box::pin(std::future::ready(decisions))
    }

    fn settled(&self, _tag: Tag, _message_id: &str, _delivered: bool) {}

    fn redelivery_deleted(&self, _key: &EpochKey, _message_id: &str, _sent_at_ms: i64) -> bool {
        false
    }

    fn held(&self, _covered_until_ms: i64, _drain_millis_per_second: u64, _in_flight: u64) {}
}
