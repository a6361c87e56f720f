//! The `sqs` sink: forward records to another queue with SendMessageBatch.
//!
//! Why batches of at most 10 and 1 MiB: those are SendMessageBatch's limits, and one batch per
//! 10 records is what makes forwarding cheap (SQS bills per request). A batch answers per entry,
//! so only the failed entries are retried: entries the service blames on the sender are
//! `Rejected` (dead-lettered), the rest retried per policy and then `Failed`.
//!
//! To a FIFO target (`*.fifo`) the sink keeps the record's MessageGroupId, so per-group order
//! survives, and sends the source MessageId as MessageDeduplicationId, so a redelivered record is
//! dropped by SQS. The group is `sqs.messageGroupId` when set, else the source's group, else (a
//! standard source) the sink name. SQS deduplicates only within its 5-minute deduplication
//! interval: this sink is exactly-once (`Idempotent`) only if a record's redelivery reaches the
//! target within 5 minutes of its first send. To a standard target it is at-least-once.
//!
//! Message attributes travel with the DataType they were received with (a Binary one, kept as
//! base64 text in the Record, is sent as bytes again); empty values are left out because SQS
//! refuses them. SQS takes at most 10: beyond that the first 9 travel as they are and the rest
//! together in one packed attribute (`sqs_attributes`), counted and named in a WARN line.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Region;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures::future::{BoxFuture, join_all};
use sluice_crds::SqsSinkSpec;

use super::aws_error::{self, AwsFailure};
use super::error::SinkBuildError;
use super::retry::{AttemptError, Attempts, RetryPolicy};
use super::sqs_attributes::{self, PACKED, data_type};
use super::sqs_offload::Offload;
use super::url::parse_http_url;
use super::{EpochSupport, Outcome, Sink};
use crate::aws::requests::Requests;
use crate::process::sink_stats::SinkStats;
use crate::process::warnings::{WINDOW, Warnings};
use crate::record::Record;

/// SendMessageBatch limits.
pub const MAX_BATCH_ENTRIES: usize = 10;
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
pub use super::sqs_attributes::MAX_MESSAGE_ATTRIBUTES;

pub struct SqsSink {
    name: String,
    client: Client,
    queue_url: String,
    /// `None` for a standard target.
    fifo: Option<FifoGroup>,
    policy: RetryPolicy,
    stats: Arc<SinkStats>,
    /// The rate limit of this sink's own WARN lines (attributes packed).
    warnings: Warnings,
    /// `sqs.offload`: large bodies go to S3, the message carries a pointer.
    offload: Option<Offload>,
}

impl SqsSink {
    /// Errors name the offending field relative to the sink (`sqs.queueUrl`). The SDK's own retries are turned off so
    /// that `delivery.retry` is the one policy, and every retry is counted.
    pub fn new(
        name: &str,
        spec: &SqsSinkSpec,
        aws: &aws_config::SdkConfig,
        requests: &Arc<Requests>,
        policy: RetryPolicy,
    ) -> Result<Self, SinkBuildError> {
        parse_http_url(&spec.queue_url).map_err(|m| SinkBuildError::new("sqs.queueUrl", m))?;
        let mut config = aws_sdk_sqs::config::Builder::from(aws).retry_config(RetryConfig::disabled());
        if let Some(endpoint) = &spec.endpoint {
            parse_http_url(endpoint).map_err(|m| SinkBuildError::new("sqs.endpoint", m))?;
            config = config.endpoint_url(endpoint);
        }
        if let Some(region) = &spec.region {
            config = config.region(Region::new(region.clone()));
        }
        let client = Client::from_conf(config.interceptor(requests.interceptor()).build());
        let offload = match &spec.offload {
            Some(offload) => {
                Some(Offload::new(offload, spec.endpoint.as_deref(), spec.region.as_deref(), aws, requests)?)
            }
            None => None,
        };
        let sink = Self::with_client(name, client, &spec.queue_url, spec.message_group_id.as_deref(), policy);
        Ok(Self { offload, ..sink })
    }

    /// `group` is `sqs.messageGroupId` (FIFO targets only).
    pub fn with_client(
        name: &str,
        client: Client,
        queue_url: &str,
        group: Option<&str>,
        policy: RetryPolicy,
    ) -> Self {
        let fifo = queue_url.ends_with(".fifo").then(|| match group {
            Some(group) => FifoGroup::Fixed(group.to_owned()),
            None => FifoGroup::SourceOr(name.to_owned()),
        });
        Self {
            name: name.to_owned(),
            client,
            queue_url: queue_url.to_owned(),
            fifo,
            policy,
            stats: Arc::default(),
            warnings: Warnings::default(),
            offload: None,
        }
    }

    /// Send one batch, retrying its failed entries; one outcome per record of `records`.
    async fn send_batch(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; records.len()];
        let mut pending = Vec::with_capacity(records.len());
        let sent = join_all(records.iter().map(|r| self.offloaded(r))).await;
        for (i, record) in sent.into_iter().enumerate() {
            let record = match record {
                Ok(record) => record,
                Err(reason) => {
                    outcomes[i] = Some(Outcome::Failed { reason });
                    continue;
                }
            };
            match entry(&i.to_string(), &record, self.fifo.as_ref()) {
                Ok(entry) => {
                    self.note_packed(&record);
                    pending.push((i, entry));
                }
                Err(reason) => outcomes[i] = Some(Outcome::Rejected { reason }),
            }
        }
        let mut attempts = Attempts::new(&self.policy, &self.stats);
        while !pending.is_empty() {
            let (retry, failure) = self.attempt(&pending, &mut outcomes).await;
            pending.retain(|(i, _)| retry.contains(i));
            let Some(failure) = failure else { break };
            let delay = match attempts.failed(failure.class(&self.policy)) {
                Ok(delay) => delay,
                Err(_) => {
                    let reason = match failure {
                        AwsFailure::Fatal { reason } => reason,
                        AwsFailure::Transient { reason, .. } => {
                            format!("{reason} (gave up after {} attempts)", attempts.made())
                        }
                    };
                    for (i, _) in &pending {
                        outcomes[*i] = Some(Outcome::Failed { reason: reason.clone() });
                    }
                    break;
                }
            };
            tracing::debug!(sink = %self.name, entries = pending.len(), reason = failure.reason(), ?delay, "retrying");
            tokio::time::sleep(delay).await;
        }
        let unanswered =
            || Outcome::Failed { reason: "SendMessageBatch returned no result for the entry".into() };
        outcomes.into_iter().map(|o| o.unwrap_or_else(unanswered)).collect()
    }

    /// A record sent with more attributes than SQS takes: counted, and a WARN line when one is due.
    fn note_packed(&self, record: &Record) {
        let Some(packed) = sqs_attributes::outgoing(record).packed else { return };
        self.stats.record_packed();
        if let Some(messages) = self.warnings.due(&self.name, "attributes_packed") {
            let count = record.message_attributes.values().filter(|v| !v.is_empty()).count();
            let (sink, window, names) = (&self.name, WINDOW.as_secs(), packed.names.join(", "));
            tracing::warn!(
                sink,
                messages,
                "sink {sink} sent {messages} messages in up to {window} s with more message attributes than SQS takes ({MAX_MESSAGE_ATTRIBUTES}); the latest had {count}, and {names} travel packed as JSON in the attribute {PACKED}: consumers read them from there"
            );
        }
    }

    /// The record as it is sent: offloaded to S3 when `sqs.offload` is set and it is over the threshold.
    async fn offloaded(&self, record: &Arc<Record>) -> Result<Arc<Record>, String> {
        match &self.offload {
            Some(offload) if entry_size(record) > offload.threshold => offload.offload(record).await,
            _ => Ok(record.clone()),
        }
    }

    /// One SendMessageBatch of the `pending` entries. Settles what it can in `outcomes` and
    /// returns the indexes still to retry and why (`None` when nothing is left to retry).
    async fn attempt(
        &self,
        pending: &[(usize, SendMessageBatchRequestEntry)],
        outcomes: &mut [Option<Outcome>],
    ) -> (Vec<usize>, Option<AwsFailure>) {
        let started = Instant::now();
        let sent = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(pending.iter().map(|(_, e)| e.clone()).collect()))
            .send()
            .await;
        self.stats.record_request(started.elapsed());
        let output = match sent {
            Ok(output) => output,
            Err(error) => {
                return (pending.iter().map(|(i, _)| *i).collect(), Some(aws_error::classify(&error)));
            }
        };
        let mut failure = None;
        let mut settle = |id: &str, outcome: Outcome| {
            if let Some(slot) = id.parse::<usize>().ok().and_then(|i| outcomes.get_mut(i)) {
                *slot = Some(outcome);
            }
        };
        for done in output.successful() {
            settle(done.id(), Outcome::Delivered);
        }
        for failed in output.failed() {
            let reason = format!(
                "SendMessageBatch entry failed: {}: {}",
                failed.code(),
                failed.message().unwrap_or_default()
            );
            if failed.sender_fault() {
                settle(failed.id(), Outcome::Rejected { reason });
            } else {
                // A receiver fault on one entry is the service's: always worth retrying.
                failure = Some(AwsFailure::Transient { kind: AttemptError::ServiceFault, reason });
            }
        }
        let retry: Vec<usize> = pending.iter().map(|(i, _)| *i).filter(|i| outcomes[*i].is_none()).collect();
        if retry.is_empty() {
            return (retry, None);
        }
        let failure = failure.unwrap_or_else(|| AwsFailure::Transient {
            kind: AttemptError::ServiceFault,
            reason: "SendMessageBatch returned no result for some entries".into(),
        });
        (retry, Some(failure))
    }
}

impl Sink for SqsSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            if self.fifo.is_some() {
                // One batch after the other: SQS orders a group by arrival, and two batches in
                // flight at once may arrive in either order.
                let mut outcomes = Vec::with_capacity(records.len());
                for range in batches(records) {
                    outcomes.extend(self.send_batch(&records[range]).await);
                }
                return outcomes;
            }
            let sends = batches(records).into_iter().map(|range| self.send_batch(&records[range]));
            join_all(sends).await.into_iter().flatten().collect()
        })
    }

    fn epoch_support(&self) -> EpochSupport {
        if self.fifo.is_some() { EpochSupport::Idempotent } else { EpochSupport::None }
    }

    fn stats(&self) -> Option<Arc<SinkStats>> {
        Some(self.stats.clone())
    }
}

/// Consecutive ranges of `records`, each within SendMessageBatch's entry and size limits. A record
/// larger than the size limit on its own still gets a batch of its own (SQS then judges it).
pub fn batches(records: &[Arc<Record>]) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, record) in records.iter().enumerate() {
        let size = entry_size(record);
        if i > start && (i - start == MAX_BATCH_ENTRIES || bytes + size > MAX_BATCH_BYTES) {
            ranges.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < records.len() {
        ranges.push(start..records.len());
    }
    ranges
}

/// Bytes SQS counts for the entry: body plus attributes (`sqs_attributes::size`).
fn entry_size(record: &Record) -> usize {
    record.body.len() + sqs_attributes::size(record)
}

/// The attribute as it was received: a Binary one (kept base64 in the record) as bytes again, a
/// Number one as a Number, each with its DataType (custom suffixes included).
fn typed_attribute(record: &Record, name: &str, value: &str) -> Result<MessageAttributeValue, String> {
    let data_type = data_type(record, name);
    let builder = MessageAttributeValue::builder().data_type(data_type);
    let builder = if data_type.starts_with("Binary") {
        let bytes = aws_smithy_types::base64::decode(value)
            .map_err(|e| format!("message attribute {name}: Binary value is not base64: {e}"))?;
        builder.binary_value(aws_sdk_sqs::primitives::Blob::new(bytes))
    } else {
        builder.string_value(value)
    };
    builder.build().map_err(|e| format!("message attribute {name}: {e}"))
}

/// How a FIFO target's MessageGroupId is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FifoGroup {
    /// `sqs.messageGroupId`: every forwarded message in this group.
    Fixed(String),
    /// The source message's group; for messages of a standard queue (which have no order to keep)
    /// one of [`SPREAD_GROUPS`] groups named after this (the sink name), chosen by the MessageId.
    SourceOr(String),
}

/// Groups a standard source's messages are spread over in a FIFO target. One group would let the
/// target's consumers hold only one batch in flight at a time (SQS locks a group while any of its
/// messages is in flight); a fixed set, chosen by a hash of the MessageId, lets them work in
/// parallel while a redelivery still lands in the same group (and so is deduplicated the same way).
pub const SPREAD_GROUPS: u64 = 16;

/// `<name>-<nn>`: the spread group of a message without a group of its own.
pub fn spread_group(name: &str, message_id: &str) -> String {
    // FNV-1a: stable across processes and versions, unlike std's randomly seeded hasher.
    let hash = message_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{name}-{:02}", hash % SPREAD_GROUPS)
}

/// The SendMessageBatch entry for `record` (`fifo`: `None` for a standard target), or why the
/// record can never be sent.
pub fn entry(
    id: &str,
    record: &Record,
    fifo: Option<&FifoGroup>,
) -> Result<SendMessageBatchRequestEntry, String> {
    let body = std::str::from_utf8(&record.body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    if let Some(c) = body.chars().find(|c| !allowed_in_body(*c)) {
        return Err(format!("body contains a character SQS refuses: U+{:04X}", u32::from(c)));
    }
    if body.is_empty() {
        return Err("body is empty; SQS refuses empty messages".into());
    }
    let mut entry = SendMessageBatchRequestEntry::builder().id(id).message_body(body);
    let outgoing = sqs_attributes::outgoing(record);
    for name in outgoing.direct {
        let value = record.message_attributes.get(name).map_or("", String::as_str);
        entry = entry.message_attributes(name, typed_attribute(record, name, value)?);
    }
    if let Some(packed) = outgoing.packed {
        let value = MessageAttributeValue::builder().data_type("String").string_value(packed.json).build();
        entry =
            entry.message_attributes(PACKED, value.map_err(|e| format!("message attribute {PACKED}: {e}"))?);
    }
    if let Some(rule) = fifo {
        let group = match rule {
            FifoGroup::Fixed(group) => group.clone(),
            FifoGroup::SourceOr(_) if record.group_id.is_some() => {
                record.group_id.clone().unwrap_or_default()
            }
            FifoGroup::SourceOr(name) => spread_group(name, &record.message_id),
        };
        entry = entry.message_group_id(group).message_deduplication_id(&record.message_id);
    }
    entry.build().map_err(|e| format!("cannot build the SQS entry: {e}"))
}

/// SQS's allowed body characters: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
fn allowed_in_body(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::sink::testing::record;

    fn sized(n: usize) -> Arc<Record> {
        let mut r = record("m");
        r.body = Bytes::from(vec![b'x'; n]);
        Arc::new(r)
    }

    #[test]
    fn batches_hold_at_most_ten_entries() {
        let records: Vec<_> = (0..25).map(|_| sized(10)).collect();
        assert_eq!(batches(&records), vec![0..10, 10..20, 20..25]);
        assert_eq!(batches(&[]), Vec::<Range<usize>>::new());
    }

    #[test]
    fn batches_stay_under_the_size_limit() {
        let records =
            vec![sized(400 * 1024), sized(400 * 1024), sized(400 * 1024), sized(1200 * 1024), sized(1)];
        assert_eq!(batches(&records), vec![0..2, 2..3, 3..4, 4..5]);
    }

    #[test]
    fn fifo_entries_keep_the_group_and_dedup_on_the_message_id() {
        let mut r = record("id-1");
        r.group_id = Some("customer-7".into());
        let source_or = FifoGroup::SourceOr("forward".into());
        let e = entry("0", &r, Some(&source_or)).unwrap();
        assert_eq!(e.message_group_id(), Some("customer-7"));
        assert_eq!(e.message_deduplication_id(), Some("id-1"));
        assert_eq!(e.message_body(), "body-id-1");
        let standard_source = entry("0", &record("id-2"), Some(&source_or)).unwrap();
        assert_eq!(standard_source.message_group_id(), Some(spread_group("forward", "id-2").as_str()));
        assert!(spread_group("forward", "id-2").starts_with("forward-"));
        assert_eq!(
            spread_group("f", "same-id"),
            spread_group("f", "same-id"),
            "a redelivery keeps its group"
        );
        let groups: std::collections::BTreeSet<String> =
            (0..200).map(|i| spread_group("f", &format!("message-{i}"))).collect();
        assert_eq!(groups.len(), SPREAD_GROUPS as usize, "200 ids use every spread group");
        let fixed = entry("0", &r, Some(&FifoGroup::Fixed("all".into()))).unwrap();
        assert_eq!(fixed.message_group_id(), Some("all"));
        let standard_target = entry("0", &r, None).unwrap();
        assert_eq!(standard_target.message_group_id(), None);
        assert_eq!(standard_target.message_deduplication_id(), None);
    }

    #[test]
    fn eleven_non_empty_attributes_go_as_nine_plus_the_packed_rest() {
        let mut r = record("m");
        for i in 0..12 {
            r.message_attributes.insert(format!("a{i:02}"), format!("v{i}"));
        }
        r.message_attributes.insert("a00".into(), String::new());
        let e = entry("0", &r, None).unwrap();
        let attributes = e.message_attributes().unwrap();
        assert_eq!(attributes.len(), 10);
        assert!(!attributes.contains_key("a00"), "an empty value is left out");
        assert_eq!(attributes["a01"].string_value(), Some("v1"));
        assert_eq!(attributes["a01"].data_type(), "String");
        assert!(attributes.contains_key("a09") && !attributes.contains_key("a10"));
        let packed: serde_json::Value =
            serde_json::from_str(attributes[PACKED].string_value().unwrap()).unwrap();
        assert_eq!(packed["a10"]["StringValue"], "v10");
        assert_eq!(packed["a11"]["StringValue"], "v11");
        let ten = {
            let mut r = r.clone();
            r.message_attributes.remove("a11");
            entry("0", &r, None).unwrap()
        };
        assert!(!ten.message_attributes().unwrap().contains_key(PACKED), "10 fit as they are");
    }

    #[test]
    fn unsendable_bodies_are_rejected_with_a_reason() {
        let mut r = record("m");
        r.body = Bytes::from_static(b"\xff\xfe");
        assert!(entry("0", &r, None).unwrap_err().contains("UTF-8"));
        r.body = Bytes::from_static(b"a\x01b");
        assert!(entry("0", &r, None).unwrap_err().contains("U+0001"));
        r.body = Bytes::new();
        assert!(entry("0", &r, None).unwrap_err().contains("empty"));
    }
}
