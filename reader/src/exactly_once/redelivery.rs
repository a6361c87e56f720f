//! Exactly-once intake: what to do with each received message before it may be delivered.
//!
//! Why every receive is sorted: under exactlyOnce a message can come back after a reader acked it
//! in an epoch (the reader died, was paused, or its delete failed). Delivering it again would
//! duplicate it in the committed output. So each message is classified against the leases
//! (`Driver::classify`, `protocol/PROTOCOL.md` "redelivered messages"):
//! - `Fresh`: tagged with the open epoch and delivered;
//! - `Committed(key)`: its output is committed under `key`: `settle` makes sure that output is
//!   visible (commit is idempotent) and deletes the message without delivering it; the gate
//!   then tells the driver, so the lease entry can shrink;
//! - `Undecided`: recorded in an acked epoch whose fate is not known yet: neither delivered nor
//!   deleted nor released; it stays invisible until its visibility timeout runs out, by which
//!   time the epoch is committed or its reader fenced. (Releasing it at once would only bring it
//!   straight back.)
//!
//! Each answer is a `settle::Decision` that `settle` carries out. A message that may not be
//! tagged (the reader stopped being a member meanwhile) is released.
//! On a FIFO queue a group whose message is held back holds back the rest of that group in the
//! batch too (released), so order within the group is kept.

use std::collections::HashSet;
use std::sync::Arc;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use sluice_protocol::Redelivery;

use super::Driver;
use super::events::ClassifyFailed;
use crate::aws::queue::Queue;
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::settle::{Decision, Tag};

/// Sort received messages: one decision each, in order.
pub async fn sort(
    driver: &Arc<Driver>,
    metrics: &Metrics,
    queue: &Queue,
    messages: &[Message],
) -> Vec<Decision> {
    let mut blocked_groups: HashSet<String> = HashSet::new();
    let asks: Vec<(String, u32)> =
        messages.iter().map(|m| (m.message_id().unwrap_or_default().to_owned(), receive_count(m))).collect();
    let verdicts = match driver.classify_many(asks).await {
        Ok(verdicts) => verdicts,
        Err(error) => {
            ClassifyFailed { error: &error.to_string(), messages: messages.len() }.emit(metrics);
            vec![Redelivery::Undecided; messages.len()]
        }
    };
    let mut decisions = Vec::with_capacity(messages.len());
    for (message, verdict) in messages.iter().zip(verdicts) {
        let group = queue.fifo.then(|| group_of(message)).flatten();
        if group.as_ref().is_some_and(|g| blocked_groups.contains(g)) {
            decisions.push(Decision::Release);
            continue;
        }
        let decision = match verdict {
            Redelivery::Fresh => match driver.tag_with_incarnation() {
                Some((incarnation, epoch)) => Decision::Deliver(Tag { incarnation: incarnation.0, epoch }),
                None => Decision::Release,
            },
            Redelivery::Committed(key) => {
                let id = message.message_id().unwrap_or_default();
                tracing::debug!(message_id = %id, pod = %key.pod, epoch = key.epoch, "already committed; deleting without delivery");
                Decision::FinishCommitted(key)
            }
            Redelivery::Undecided => {
                let id = message.message_id().unwrap_or_default();
                tracing::debug!(message_id = %id, "recorded in an epoch not yet decided; leaving it invisible");
                Decision::LeaveInvisible
            }
        };
        let held_back = matches!(decision, Decision::Release | Decision::LeaveInvisible);
        if held_back && let Some(g) = group {
            blocked_groups.insert(g);
        }
        decisions.push(decision);
    }
    decisions
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
