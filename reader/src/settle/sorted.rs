//! Carrying out the gate's [`Decision`]s on a received batch.
//!
//! Why here and not in the gate: every decision ends in the ledger and the acker (admit, then
//! release or delete), which are `settle`'s; the gate only says which. So the exactly-once side
//! answers a question and never holds the pipeline.

use std::sync::Arc;

use aws_sdk_sqs::types::Message;
use sluice_protocol::{EpochKey, now_ms};

use super::epoch_steps::sink_failed;
use super::gate::Decision;
use super::ledger::{Tag, Ticket};
use super::pipeline::{Arrival, Pipeline};
use crate::aws::queue::Queue;
use crate::process::events::Fault;

impl Pipeline {
    /// Ask the gate about a received batch and carry out its answers; answers the messages to
    /// deliver, with their tags (in the order received). The others are handled here: released,
    /// deleted as already committed (in a task the drain waits for), or left invisible.
    pub async fn sort(self: &Arc<Self>, queue: &Queue, messages: Vec<Message>) -> Vec<(Message, Tag)> {
        let decisions = self.gate.sort(queue, &messages).await;
        let mut deliver = Vec::with_capacity(messages.len());
        let mut release = Vec::new();
        let mut committed = Vec::new();
        for (message, decision) in messages.into_iter().zip(decisions) {
            match decision {
                Decision::Deliver(tag) => deliver.push((message, tag)),
                Decision::Release => release.push(message),
                Decision::FinishCommitted(key) => committed.push((message, key)),
                Decision::LeaveInvisible => self.metrics.fault(Fault::Undecided),
            }
        }
        if !release.is_empty() {
            let tickets = self.admit(queue.index, &arrivals(&release), queue.visibility);
            self.release_tickets(&tickets);
        }
        for (message, key) in committed {
            let ticket =
                self.admit(queue.index, &arrivals(std::slice::from_ref(&message)), queue.visibility)[0];
            let id = message.message_id().unwrap_or_default().to_owned();
            let pipeline = self.clone();
            self.deliveries.spawn(async move { pipeline.finish_committed(ticket, &id, &key).await });
        }
        deliver
    }

    /// A redelivery of a committed message: finish the commit, delete it, report the delete.
    async fn finish_committed(&self, ticket: Ticket, id: &str, key: &EpochKey) {
        let sinks = self.dispatcher.sinks();
        if !sinks.commit(key, &self.abort, sink_failed(&self.metrics, &sinks.circuits, key)).await {
            self.release_tickets(&[ticket]);
            return;
        }
        let Some(receipt) = self.lock_ledger().take_for_delete(ticket) else { return };
        let sent_at = now_ms();
        let confirmed = self.acker.delete_confirmed(vec![(ticket, receipt)]).await;
        if confirmed.contains(&ticket) && self.gate.redelivery_deleted(key, id, sent_at) {
            self.metrics.redelivered_committed.inc();
        }
    }
}

fn arrivals(messages: &[Message]) -> Vec<Arrival> {
    messages
        .iter()
        .map(|m| Arrival {
            message_id: m.message_id().unwrap_or_default().to_owned(),
            handle: m.receipt_handle().unwrap_or_default().to_owned(),
            tag: Tag::NONE,
        })
        .collect()
}
