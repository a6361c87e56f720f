//! The one seam between the stages and the checkpoint protocol.
//!
//! Why a gate: under exactlyOnce every stage has a question for the protocol (may a poller
//! receive now; what is this received message, fresh or a redelivery of something already
//! acked; this tagged message is settled; the held messages are covered until then), and under
//! atLeastOnce none has. The stages ask a `Gate` and never know which guarantee answers:
//! [`Open`] here, or the exactly-once gate (`exactly_once::EpochGate`) that carries out the
//! protocol's own work beside the pipeline.

use std::sync::Arc;

use aws_sdk_sqs::types::Message;
use futures::future::BoxFuture;

use super::ledger::Tag;
use super::pipeline::Pipeline;
use crate::aws::queue::Queue;

pub trait Gate: Send + Sync {
    /// May a poller receive a batch of up to `batch` messages now? `false`: look again shortly.
    fn may_receive(&self, batch: usize) -> bool;

    /// Sort a received batch: answers the messages to deliver, each with its tag. The others the
    /// gate settles itself through `pipeline` (released, deleted as already committed, or left
    /// invisible until their fate is known).
    fn sort<'a>(
        &'a self,
        pipeline: &'a Arc<Pipeline>,
        queue: &'a Queue,
        messages: Vec<Message>,
    ) -> BoxFuture<'a, Vec<(Message, Tag)>>;

    /// A message tagged `tag` (never [`Tag::NONE`]) is settled: delivered (or dead-lettered), or
    /// released to the queue.
    fn settled(&self, tag: Tag, message_id: &str, delivered: bool);

    /// The heartbeat's figures after each beat: every held message is invisible to others until
    /// `covered_until_ms` (ms since the Unix epoch; `i64::MAX` when none is held), the drain rate
    /// in thousandths of a message per second, and the messages held.
    fn held(&self, covered_until_ms: i64, drain_millis_per_second: u64, in_flight: u64);
}

/// atLeastOnce: always open, nothing tagged; the heartbeat's drain rate goes to the reader's
/// report (`held_report`), as the lease renewals carry it under exactlyOnce.
pub struct Open;

impl Gate for Open {
    fn may_receive(&self, _batch: usize) -> bool {
        true
    }

    fn sort<'a>(
        &'a self,
        _pipeline: &'a Arc<Pipeline>,
        _queue: &'a Queue,
        messages: Vec<Message>,
    ) -> BoxFuture<'a, Vec<(Message, Tag)>> {
        Box::pin(async move { messages.into_iter().map(|m| (m, Tag::NONE)).collect() })
    }

    fn settled(&self, _tag: Tag, _message_id: &str, _delivered: bool) {}

    fn held(&self, _covered_until_ms: i64, drain_millis_per_second: u64, _in_flight: u64) {
        super::held_report::drained(drain_millis_per_second);
    }
}
