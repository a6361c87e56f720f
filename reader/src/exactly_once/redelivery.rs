//! Exactly-once intake: what to do with each received message before it may be delivered.
//!
//! Why every receive is sorted: under exactlyOnce a message can come back after a reader acked it
//! in an epoch (the reader died, was paused, or its delete failed). Delivering it again would
//! duplicate it in the committed output. So each message is classified against the leases
//! (`Driver::classify`, `protocol/PROTOCOL.md` "redelivered messages"):
//! - `Fresh`: tagged with the open epoch and delivered;
//! - `Committed(key)`: its output is committed under `key`: make sure that output is visible
//!   (commit is idempotent), delete the message without delivering it, and tell the driver so
//!   the lease entry can shrink;
//! - `Undecided`: recorded in an acked epoch whose fate is not known yet: neither delivered nor
//!   deleted nor released; it stays invisible until its visibility timeout runs out, by which
//!   time the epoch is committed or its reader fenced. (Releasing it at once would only bring it
//!   straight back.)
//!
//! A message that may not be tagged (the reader stopped being a member meanwhile) is released.
//! On a FIFO queue a group whose message is held back holds back the rest of that group in the
//! batch too (released), so order within the group is kept.

use std::collections::HashSet;
use std::sync::Arc;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use sluice_protocol::{EpochKey, Redelivery, now_ms};

use super::Driver;
use super::worker::sink_failed;
use crate::aws::queue::Queue;
use crate::settle::ledger::Tag;
use crate::settle::{Arrival, Pipeline};

/// Sort received messages; answers those to deliver, with their tags. The others are handled
/// here (released, or deleted as already committed, or left invisible).
pub async fn sort(
    pipeline: &Arc<Pipeline>,
    driver: &Arc<Driver>,
    queue: &Queue,
    messages: Vec<Message>,
) -> Vec<(Message, Tag)> {
    let mut deliver = Vec::with_capacity(messages.len());
    let mut release = Vec::new();
    let mut committed = Vec::new();
    let mut blocked_groups: HashSet<String> = HashSet::new();
    let asks: Vec<(String, u32)> =
        messages.iter().map(|m| (m.message_id().unwrap_or_default().to_owned(), receive_count(m))).collect();
    let verdicts = match driver.classify_many(asks).await {
        Ok(verdicts) => verdicts,
        Err(error) => {
            tracing::warn!(%error, messages = messages.len(), "cannot classify redelivered messages; leaving them for later");
            pipeline.metrics().error("classify", "api");
            vec![Redelivery::Undecided; messages.len()]
        }
    };
    for (message, verdict) in messages.into_iter().zip(verdicts) {
        let id = message.message_id().unwrap_or_default().to_owned();
        let group = queue.fifo.then(|| group_of(&message)).flatten();
        if group.as_ref().is_some_and(|g| blocked_groups.contains(g)) {
            release.push(message);
            continue;
        }
        let held_back = match verdict {
            Redelivery::Fresh => match driver.tag_with_incarnation() {
                Some((incarnation, epoch)) => {
                    deliver.push((message, Tag { incarnation: incarnation.0, epoch }));
                    false
                }
                None => {
                    release.push(message);
                    true
                }
            },
            Redelivery::Committed(key) => {
                tracing::debug!(message_id = %id, pod = %key.pod, epoch = key.epoch, "already committed; deleting without delivery");
                committed.push((message, key));
                false
            }
            Redelivery::Undecided => {
                tracing::debug!(message_id = %id, "recorded in an epoch not yet decided; leaving it invisible");
                pipeline.metrics().error("classify", "undecided");
                true
            }
        };
        if held_back && let Some(g) = group {
            blocked_groups.insert(g);
        }
    }
    if !release.is_empty() {
        let tickets = pipeline.admit(queue.index, &arrivals(&release), queue.visibility);
        pipeline.release_tickets(&tickets);
    }
    for (message, key) in committed {
        let ticket =
            pipeline.admit(queue.index, &arrivals(std::slice::from_ref(&message)), queue.visibility)[0];
        let id = message.message_id().unwrap_or_default().to_owned();
        let (finisher, driver) = (pipeline.clone(), driver.clone());
        pipeline.spawn(async move { delete_committed(&finisher, &driver, ticket, &id, &key).await });
    }
    deliver
}

/// A redelivery of a committed message: finish the commit, delete it, shrink the lease entry.
async fn delete_committed(pipeline: &Pipeline, driver: &Arc<Driver>, ticket: u64, id: &str, key: &EpochKey) {
    if !pipeline.sinks().commit(key, pipeline.aborted(), sink_failed(pipeline.metrics(), key)).await {
        pipeline.release_tickets(&[ticket]);
        return;
    }
    let Some(receipt) = pipeline.lock_ledger().take_for_delete(ticket) else { return };
    let sent_at = now_ms();
    let confirmed = pipeline.acker().delete_confirmed(vec![(ticket, receipt)]).await;
    // Only a delete sent on a valid lease had a current handle (see `Backend::lease_valid_until_ms`).
    if confirmed.contains(&ticket) && sent_at < driver.backend().lease_valid_until_ms() {
        pipeline.metrics().redelivered_committed.inc();
        driver.redelivered_deleted(key, id);
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

fn receive_count(message: &Message) -> u32 {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|v| v.parse().ok())
        // Unknown: assume a redelivery, so it is looked up rather than delivered blindly.
        .unwrap_or(2)
}

fn group_of(message: &Message) -> Option<String> {
    message.attributes().and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId)).cloned()
}
