//! The SQS side of a replay: find the dead-letter queue and the source queues, receive dead
//! letters, send copies back, delete what was sent, and hide or show what stays.
//!
//! Why the operator's own mover and not SQS's StartMessageMoveTask: a move task takes every
//! message of a queue that is some queue's RedrivePolicy target, with no filter; a source's
//! dead-letter sink is usually not such a queue, and a request may ask for a time window or a
//! reason. The mover also stamps each copy with the request's id (`sluice-replay-id`) and drops
//! the dead-letter context attributes, which a move task cannot. Every call is bounded by a
//! timeout and runs with the source's identity (`crate::identity`).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use sluice_crds::{QueueRef, RedrivePolicy, SqsSourceSpec};

use super::plan::{Candidate, DEAD_LETTER_CONTEXT, MARKER};
use crate::identity::Identities;
use crate::queue_check::sqs::{SqsInspector, region_of_url};
use sluice_aws::describe_call;

/// Upper bound on one AWS call.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a received dead letter stays invisible: long enough to send and delete a batch.
pub const IN_HAND_SECONDS: i32 = 30;
/// How long a dead letter the request leaves behind stays hidden, so the request can tell when
/// every message it wants has been taken; shown again when the request completes.
pub const HIDE_SECONDS: i32 = 600;
/// SQS's limit of message attributes.
const MAX_ATTRIBUTES: usize = 10;

/// The queues of one replay.
pub struct Mover {
    dlq: Client,
    pub dlq_url: String,
    /// The source's queues by URL, each with its client.
    targets: Vec<(String, Client)>,
}

async fn bounded<T, E>(
    call: impl Future<Output = Result<T, E>>,
    what: impl FnOnce(E) -> String,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(what),
        Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
    }
}

fn client_for(sqs: &SqsInspector, endpoint: Option<&str>, region: Option<&str>, url: Option<&str>) -> Client {
    let region = region.map(str::to_owned).or_else(|| url.and_then(region_of_url));
    sqs.client(endpoint, region.as_deref())
}

async fn queue_url(client: &Client, queue: &QueueRef) -> Result<String, String> {
    if let Some(url) = &queue.url {
        return Ok(url.clone());
    }
    let name = queue.name.clone().unwrap_or_default();
    let out = bounded(client.get_queue_url().queue_name(&name).send(), |e| describe_call("GetQueueUrl", &e))
        .await?;
    out.queue_url.ok_or_else(|| format!("GetQueueUrl returned no URL for queue {name}"))
}

impl Mover {
    /// Finds the queues of `spec`: its sqs dead-letter sink, else the dead-letter queue of its
    /// first queue's RedrivePolicy. `Err` is one line saying what to change or what failed.
    pub async fn resolve(identities: &Identities, spec: &SqsSourceSpec) -> Result<Self, String> {
        let sqs = identities.for_source(&spec.credentials).await;
        let mut targets = Vec::new();
        for queue in &spec.queues {
            let client =
                client_for(&sqs, queue.endpoint.as_deref(), queue.region.as_deref(), queue.url.as_deref());
            targets.push((queue_url(&client, queue).await?, client));
        }
        let sink = spec.dead_letter_sink.as_ref().and_then(|s| s.sqs.as_ref());
        if let Some(sink) = sink {
            let dlq = client_for(
                &sqs,
                sink.endpoint.as_deref(),
                sink.region.as_deref(),
                Some(sink.queue_url.as_str()),
            );
            return Ok(Self { dlq, dlq_url: sink.queue_url.clone(), targets });
        }
        let (first_url, first) = targets.first().cloned().ok_or("spec.queues is empty")?;
        let attributes = bounded(
            first
                .get_queue_attributes()
                .queue_url(&first_url)
                .attribute_names(QueueAttributeName::RedrivePolicy)
                .send(),
            |e| describe_call("GetQueueAttributes", &e),
        )
        .await?;
        let policy = attributes.attributes().and_then(|a| a.get(&QueueAttributeName::RedrivePolicy));
        let arn = RedrivePolicy::parse(policy.map(String::as_str))?
            .map(|p| p.dead_letter_target_arn)
            .filter(|arn| !arn.is_empty())
            .ok_or_else(|| format!("spec.replay: the source has no sqs deadLetterSink and its queue {first_url} has no RedrivePolicy, so there is no dead-letter queue to replay: add spec.deadLetterSink.sqs or remove spec.replay"))?;
        let mut parts = arn.rsplit(':');
        let (name, account) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let out =
            bounded(first.get_queue_url().queue_name(name).queue_owner_aws_account_id(account).send(), |e| {
                describe_call("GetQueueUrl", &e)
            })
            .await?;
        let dlq_url = out.queue_url.ok_or_else(|| format!("GetQueueUrl returned no URL for {arn}"))?;
        Ok(Self { dlq: first, dlq_url, targets })
    }

    /// The source queues' URLs, in spec order.
    pub fn target_urls(&self) -> Vec<String> {
        self.targets.iter().map(|(url, _)| url.clone()).collect()
    }

    /// Up to 10 dead letters, with their attributes; empty after a 1 s wait when none is visible.
    pub async fn receive(&self) -> Result<Vec<Message>, String> {
        let call = self
            .dlq
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(IN_HAND_SECONDS)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send();
        let out = bounded(call, |e| describe_call("ReceiveMessage", &e)).await?;
        Ok(out.messages.unwrap_or_default())
    }

    /// The dead-letter queue's visible and in-flight counts (ApproximateNumberOfMessages,
    /// ApproximateNumberOfMessagesNotVisible).
    pub async fn counts(&self) -> Result<(u64, u64), String> {
        let call = self
            .dlq
            .get_queue_attributes()
            .queue_url(&self.dlq_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send();
        let out = bounded(call, |e| describe_call("GetQueueAttributes", &e)).await?;
        let count = |name: QueueAttributeName| {
            out.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        Ok((
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        ))
    }

    /// Sends copies of `messages` to `target` with the marker of request `id`; answers the
    /// indexes (into `messages`) that SQS accepted.
    pub async fn send(&self, target: &str, id: &str, messages: &[&Message]) -> Result<Vec<usize>, String> {
        let client =
            self.targets.iter().find(|(url, _)| url == target).map(|(_, c)| c).ok_or("unknown target")?;
        let fifo = target.ends_with(".fifo");
        let entries: Vec<_> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| entry(i, m, id, fifo))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot build SendMessageBatch: {e}"))?;
        let call = client.send_message_batch().queue_url(target).set_entries(Some(entries)).send();
        let out = bounded(call, |e| describe_call("SendMessageBatch", &e)).await?;
        Ok(out.successful.iter().filter_map(|s| s.id.parse().ok()).collect())
    }

    /// Deletes dead letters by receipt handle.
    pub async fn delete(&self, receipts: &[String]) -> Result<(), String> {
        if receipts.is_empty() {
            return Ok(());
        }
        let entries: Vec<_> = receipts
            .iter()
            .enumerate()
            .map(|(i, r)| {
                DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(r).build()
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot build DeleteMessageBatch: {e}"))?;
        let call = self.dlq.delete_message_batch().queue_url(&self.dlq_url).set_entries(Some(entries)).send();
        bounded(call, |e| describe_call("DeleteMessageBatch", &e)).await.map(drop)
    }

    /// Sets the visibility of dead letters: hides what the request leaves behind, shows it again
    /// (0) when the request is done.
    pub async fn set_visibility(&self, receipts: &[String], seconds: i32) -> Result<(), String> {
        for receipt in receipts {
            let call = self
                .dlq
                .change_message_visibility()
                .queue_url(&self.dlq_url)
                .receipt_handle(receipt)
                .visibility_timeout(seconds)
                .send();
            bounded(call, |e| describe_call("ChangeMessageVisibility", &e)).await?;
        }
        Ok(())
    }
}

/// A message attribute's text, if it has one.
fn text<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.message_attributes.as_ref()?.get(name)?.string_value()
}

/// The dead letter's reason: `sluice-dlq-reason`, else `reason` in the packed attribute.
pub fn reason(m: &Message) -> Option<String> {
    if let Some(r) = text(m, DEAD_LETTER_CONTEXT[0]) {
        return Some(r.to_owned());
    }
    let packed: serde_json::Value = serde_json::from_str(text(m, DEAD_LETTER_CONTEXT[3])?).ok()?;
    packed["reason"].as_str().map(str::to_owned)
}

/// The source queue the dead letter names, plain or packed.
pub fn source_queue(m: &Message) -> Option<String> {
    if let Some(q) = text(m, DEAD_LETTER_CONTEXT[2]) {
        return Some(q.to_owned());
    }
    let packed: serde_json::Value = serde_json::from_str(text(m, DEAD_LETTER_CONTEXT[3])?).ok()?;
    packed["sourceQueue"].as_str().map(str::to_owned)
}

/// The plan's view of `m`, with its reason already extracted.
pub fn candidate<'a>(m: &'a Message, reason: Option<&'a str>) -> Candidate<'a> {
    let sent_ms = m
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
        .and_then(|t| t.parse().ok());
    Candidate { id: m.message_id().unwrap_or_default(), sent_ms, reason, marker: text(m, MARKER) }
}

/// The copy of `m` sent back: its body, the user's attributes with their types, and the marker
/// (when SQS's limit of 10 leaves room); on a FIFO queue its group and a deduplication id from
/// the request and the dead letter, so SQS drops a second send within its 5-minute window.
fn entry(
    i: usize,
    m: &Message,
    id: &str,
    fifo: bool,
) -> Result<SendMessageBatchRequestEntry, aws_sdk_sqs::error::BuildError> {
    let mut attributes: HashMap<String, MessageAttributeValue> = m
        .message_attributes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !DEAD_LETTER_CONTEXT.contains(&k.as_str()) && k != MARKER)
        .collect();
    if attributes.len() < MAX_ATTRIBUTES {
        let marker = MessageAttributeValue::builder().data_type("String").string_value(id).build()?;
        attributes.insert(MARKER.to_owned(), marker);
    }
    let mut builder = SendMessageBatchRequestEntry::builder()
        .id(i.to_string())
        .message_body(m.body().unwrap_or_default())
        .set_message_attributes(Some(attributes).filter(|a| !a.is_empty()));
    if fifo {
        let group = m
            .attributes
            .as_ref()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .cloned()
            .unwrap_or_else(|| "sluice-replay".to_owned());
        let dedup: String =
            format!("{id}-{}", m.message_id().unwrap_or_default()).chars().take(128).collect();
        builder = builder.message_group_id(group).message_deduplication_id(dedup);
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(value: &str) -> MessageAttributeValue {
        MessageAttributeValue::builder().data_type("String").string_value(value).build().unwrap()
    }

    fn dead_letter(attributes: &[(&str, &str)]) -> Message {
        let mut m = Message::builder().message_id("m-1").body("{\"seq\":7}").receipt_handle("h");
        for (k, v) in attributes {
            m = m.message_attributes(*k, attribute(v));
        }
        m.attributes(MessageSystemAttributeName::SentTimestamp, "1700000000000")
            .attributes(MessageSystemAttributeName::MessageGroupId, "g1")
            .build()
    }

    #[test]
    fn the_copy_keeps_the_users_attributes_drops_the_context_and_carries_the_marker() {
        let m = dead_letter(&[("origin", "shop"), ("sluice-dlq-reason", "HTTP 400"), (MARKER, "old")]);
        let copy = entry(0, &m, "r2", false).unwrap();
        let attributes = copy.message_attributes.unwrap();
        let mut names: Vec<_> = attributes.keys().cloned().collect();
        names.sort();
        assert_eq!(names, ["origin", MARKER]);
        assert_eq!(attributes[MARKER].string_value(), Some("r2"));
        assert_eq!(copy.message_body, "{\"seq\":7}");
        assert!(copy.message_group_id.is_none());
        let fifo = entry(0, &m, "r2", true).unwrap();
        assert_eq!(fifo.message_group_id.as_deref(), Some("g1"));
        assert_eq!(fifo.message_deduplication_id.as_deref(), Some("r2-m-1"));
    }

    #[test]
    fn the_reason_and_the_source_queue_are_read_plain_or_packed() {
        let plain = dead_letter(&[("sluice-dlq-reason", "HTTP 400"), ("sluice-source-queue", "q1")]);
        assert_eq!(
            (reason(&plain).as_deref(), source_queue(&plain).as_deref()),
            (Some("HTTP 400"), Some("q1"))
        );
        let packed = dead_letter(&[("sluice-dead-letter", r#"{"reason":"HTTP 410","sourceQueue":"q2"}"#)]);
        assert_eq!(
            (reason(&packed).as_deref(), source_queue(&packed).as_deref()),
            (Some("HTTP 410"), Some("q2"))
        );
        let c = candidate(&plain, Some("HTTP 400"));
        assert_eq!((c.id, c.sent_ms, c.marker), ("m-1", Some(1_700_000_000_000), None));
    }
}
