//! The dead-letter route: where a `Rejected` record goes, with the reason it was rejected.
//!
//! Why a wrapper over an ordinary sink rather than a kind of its own: the dead-letter sink is an
//! `sqs` or `http` sink like any other (same batching, retries, CloudEvents headers); what
//! differs is the record it is handed. The wrapper copies the record and adds the reason and the
//! source's identity as message attributes, which the sqs sink sends as SQS message attributes
//! and the http sink as `ce-sluice*` extension headers (`ce-sluicedlqreason`,
//! `ce-sluicesourcemessageid`, `ce-sluicesourcequeue`, or `ce-sluicedeadletter` when packed).
//! The user's own attributes always come first: SQS's limit of 10 decides how much of the
//! context fits (see `dead_letter_record`). The message id is kept, so a FIFO
//! dead-letter queue and an idempotent receiver deduplicate a poison message that is rejected twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::sqs_attributes::MAX_MESSAGE_ATTRIBUTES;
use super::{Outcome, Sink};
use crate::record::Record;

pub const REASON: &str = "sluice-dlq-reason";
pub const SOURCE_MESSAGE_ID: &str = "sluice-source-message-id";
pub const SOURCE_QUEUE: &str = "sluice-source-queue";
/// The three above as one JSON attribute, when the user's attributes leave room for one only.
pub const PACKED: &str = "sluice-dead-letter";

/// A reason longer than this is cut (at a character boundary): it must fit in an attribute and
/// a header, and its head says what happened.
pub const MAX_REASON_BYTES: usize = 1024;

pub struct DeadLetter {
    sink: Arc<dyn Sink>,
}

impl DeadLetter {
    pub fn new(sink: Arc<dyn Sink>) -> Self {
        Self { sink }
    }

    /// The sink underneath, for its name, stats and epoch support.
    pub fn sink(&self) -> &Arc<dyn Sink> {
        &self.sink
    }

    /// Send each rejected record with its reason; one outcome per pair, in order. Only
    /// `Delivered` lets the reader delete the source message.
    pub fn send<'a>(&'a self, rejected: &'a [(Arc<Record>, String)]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let records: Vec<Arc<Record>> = rejected
                .iter()
                .map(|(record, reason)| {
                    let (dead, context_kept) = dead_letter_record(record, reason);
                    if !context_kept {
                        tracing::warn!(message_id = %record.message_id, %reason,
                            "dead-lettered without its sluice-* reason attributes: the message has 10 attributes of its own, SQS's limit");
                    }
                    Arc::new(dead)
                })
                .collect();
            self.sink.deliver(&records).await
        })
    }
}

/// `record` as the dead-letter sink receives it. The user's own (non-empty) attributes are all
/// kept, with their types: they are the message. The dead-letter context takes the room SQS's
/// limit of 10 leaves: the three `sluice-*` attributes when they fit, else the same three
/// packed as one JSON attribute [`PACKED`] (`reason`, `sourceMessageId`, `sourceQueue`); with 10
/// attributes of the user's there is no room, and the context is left out (`false`; the reader
/// logs the reason instead).
pub fn dead_letter_record(record: &Record, reason: &str) -> (Record, bool) {
    let mut attributes: BTreeMap<String, String> =
        users_attributes(record).map(|(k, v)| (k.clone(), v.clone())).collect();
    let reason = truncate(reason, MAX_REASON_BYTES);
    let room = MAX_MESSAGE_ATTRIBUTES.saturating_sub(attributes.len());
    let context_kept = room > 0;
    if room >= 3 {
        attributes.insert(REASON.to_owned(), reason.to_owned());
        attributes.insert(SOURCE_MESSAGE_ID.to_owned(), record.message_id.clone());
        attributes.insert(SOURCE_QUEUE.to_owned(), record.queue_url.to_string());
    } else if context_kept {
        let packed = serde_json::json!({
            "reason": reason,
            "sourceMessageId": record.message_id,
            "sourceQueue": &*record.queue_url,
        });
        attributes.insert(PACKED.to_owned(), packed.to_string());
    }
    let mut attribute_types = record.attribute_types.clone();
    for name in [REASON, SOURCE_MESSAGE_ID, SOURCE_QUEUE, PACKED] {
        attribute_types.remove(name);
    }
    // A streamed object is not sent on: its `sluice-s3*` attributes name it.
    (Record { message_attributes: attributes, attribute_types, object: None, ..record.clone() }, context_kept)
}

/// Whether `record` has no room left for the dead-letter context (10 attributes of its own).
pub fn leaves_context_out(record: &Record) -> bool {
    users_attributes(record).count() >= MAX_MESSAGE_ATTRIBUTES
}

/// The record's non-empty attributes but the dead-letter context (a record dead-lettered again,
/// from a dead-letter queue, gets its context anew).
fn users_attributes(record: &Record) -> impl Iterator<Item = (&String, &String)> {
    let context = |name: &str| [REASON, SOURCE_MESSAGE_ID, SOURCE_QUEUE, PACKED].contains(&name);
    record.message_attributes.iter().filter(move |(k, v)| !v.is_empty() && !context(k))
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::sink::testing::record;

    fn with_attributes(n: usize) -> Record {
        let mut r = record("poison-1");
        for i in 1..=n {
            r.message_attributes.insert(format!("attr{i:02}"), format!("{i}"));
            r.attribute_types.insert(format!("attr{i:02}"), "Number".into());
        }
        r.message_attributes.insert("attr00".into(), String::new());
        r
    }

    #[test]
    fn with_room_the_context_is_three_attributes_beside_every_original() {
        let r = with_attributes(7);
        let (dl, kept) = dead_letter_record(&r, "HTTP 400 Bad Request");
        assert!(kept);
        assert_eq!(dl.message_attributes.len(), 10);
        assert_eq!(dl.message_attributes[REASON], "HTTP 400 Bad Request");
        assert_eq!(dl.message_attributes[SOURCE_MESSAGE_ID], "poison-1");
        assert_eq!(dl.message_attributes[SOURCE_QUEUE], r.queue_url.as_ref());
        assert!(!dl.message_attributes.contains_key("attr00"), "empty values are not forwarded");
        assert_eq!(dl.message_attributes["attr07"], "7");
        assert_eq!(dl.attribute_types["attr07"], "Number");
        assert_eq!(dl.message_id, "poison-1");
        assert_eq!(dl.body, r.body);
    }

    #[test]
    fn with_room_for_one_the_context_is_packed_as_json() {
        for n in [8, 9] {
            let (dl, kept) = dead_letter_record(&with_attributes(n), "HTTP 400");
            assert!(kept);
            assert_eq!(dl.message_attributes.len(), n + 1);
            let packed: serde_json::Value = serde_json::from_str(&dl.message_attributes[PACKED]).unwrap();
            assert_eq!(packed["reason"], "HTTP 400");
            assert_eq!(packed["sourceMessageId"], "poison-1");
            assert!(!dl.message_attributes.contains_key(REASON));
        }
    }

    #[test]
    fn ten_attributes_of_the_user_are_all_kept_and_the_context_left_out() {
        let (dl, kept) = dead_letter_record(&with_attributes(10), "HTTP 400");
        assert!(!kept);
        assert_eq!(dl.message_attributes.len(), 10);
        assert!((1..=10).all(|i| dl.message_attributes.contains_key(&format!("attr{i:02}"))));
    }

    #[test]
    fn a_record_dead_lettered_twice_carries_the_newest_reason() {
        let (first, _) = dead_letter_record(&record("m"), "first");
        assert_eq!(dead_letter_record(&first, "second").0.message_attributes[REASON], "second");
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let cut = &dead_letter_record(&record("m"), &reason).0.message_attributes[REASON];
        assert_eq!(cut.len(), MAX_REASON_BYTES);
        assert_eq!(truncate("abc", 2), "ab");
        assert_eq!(truncate("aé", 2), "a");
    }

    struct Capture(Mutex<Vec<Record>>);

    impl Sink for Capture {
        fn name(&self) -> &str {
            "capture"
        }
        fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
            self.0.lock().unwrap().extend(records.iter().map(|r| (**r).clone()));
            Box::pin(async move { vec![Outcome::Delivered; records.len()] })
        }
    }

    #[tokio::test]
    async fn send_hands_the_annotated_records_to_the_sink() {
        let capture = Arc::new(Capture(Mutex::new(Vec::new())));
        let dl = DeadLetter::new(capture.clone());
        let rejected =
            vec![(Arc::new(record("a")), "bad a".to_string()), (Arc::new(record("b")), "bad b".into())];
        assert_eq!(dl.send(&rejected).await, vec![Outcome::Delivered, Outcome::Delivered]);
        let seen = capture.0.lock().unwrap();
        let reasons: Vec<_> = seen.iter().map(|r| r.message_attributes[REASON].as_str()).collect();
        assert_eq!(reasons, vec!["bad a", "bad b"]);
        assert_eq!(dl.sink().name(), "capture");
    }
}
