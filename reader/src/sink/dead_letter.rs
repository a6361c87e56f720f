//! The dead-letter route: where a `Rejected` record goes, with the reason it was rejected.
//!
//! Why a wrapper over an ordinary sink rather than a kind of its own: the dead-letter sink is an
//! `sqs` or `http` sink like any other (same batching, retries, CloudEvents headers); what
//! differs is the record it is handed. The wrapper copies the record and adds the reason and the
//! source's identity as message attributes, which the sqs sink sends as SQS message attributes
//! and the http sink as `ce-sluice*` extension headers (`ce-sluicedlqreason`,
//! `ce-sluicesourcemessageid`, `ce-sluicesourcequeue`). The message id is kept, so a FIFO
//! dead-letter queue and an idempotent receiver deduplicate a poison message that is rejected twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::sqs::MAX_MESSAGE_ATTRIBUTES;
use super::{Outcome, Sink};
use crate::record::Record;

pub const REASON: &str = "sluice-dlq-reason";
pub const SOURCE_MESSAGE_ID: &str = "sluice-source-message-id";
pub const SOURCE_QUEUE: &str = "sluice-source-queue";

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
                .map(|(record, reason)| Arc::new(dead_letter_record(record, reason)))
                .collect();
            self.sink.deliver(&records).await
        })
    }
}

/// `record` as the dead-letter sink receives it: the reason and source identity first, then as
/// many of the original (non-empty) message attributes as SQS's limit of 10 leaves room for.
pub fn dead_letter_record(record: &Record, reason: &str) -> Record {
    let mut attributes = BTreeMap::new();
    attributes.insert(REASON.to_owned(), truncate(reason, MAX_REASON_BYTES).to_owned());
    attributes.insert(SOURCE_MESSAGE_ID.to_owned(), record.message_id.clone());
    attributes.insert(SOURCE_QUEUE.to_owned(), record.queue_url.to_string());
    for (name, value) in &record.message_attributes {
        if attributes.len() >= MAX_MESSAGE_ATTRIBUTES {
            break;
        }
        if !value.is_empty() && !attributes.contains_key(name) {
            attributes.insert(name.clone(), value.clone());
        }
    }
    Record { message_attributes: attributes, ..record.clone() }
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

    #[test]
    fn reason_and_source_come_first_then_originals_up_to_ten() {
        let mut r = record("poison-1");
        for i in 0..12 {
            r.message_attributes.insert(format!("attr{i:02}"), format!("v{i}"));
        }
        r.message_attributes.insert("attr00".into(), String::new());
        let dl = dead_letter_record(&r, "HTTP 400 Bad Request");
        assert_eq!(dl.message_attributes.len(), 10);
        assert_eq!(dl.message_attributes[REASON], "HTTP 400 Bad Request");
        assert_eq!(dl.message_attributes[SOURCE_MESSAGE_ID], "poison-1");
        assert_eq!(dl.message_attributes[SOURCE_QUEUE], r.queue_url.as_ref());
        assert!(!dl.message_attributes.contains_key("attr00"), "empty values are not forwarded");
        assert_eq!(dl.message_attributes["attr01"], "v1");
        assert_eq!(dl.message_id, "poison-1");
        assert_eq!(dl.body, r.body);
    }

    #[test]
    fn a_record_dead_lettered_twice_carries_the_newest_reason() {
        let first = dead_letter_record(&record("m"), "first");
        assert_eq!(dead_letter_record(&first, "second").message_attributes[REASON], "second");
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let cut = &dead_letter_record(&record("m"), &reason).message_attributes[REASON];
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
