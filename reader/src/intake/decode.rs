//! From an SQS message to a `Record`: the payload parsed per `spec.payload.format`, the SQS
//! metadata carried along.
//!
//! Why poison is a value, not an error: a body that is not the JSON the spec promises will never
//! become valid by retrying, so it takes the same road as a sink's `Rejected` (dead-letter sink
//! with the reason, or a stop under failOnError) instead of being released forever.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_sqs::types::{Message, MessageAttributeValue};
use bytes::Bytes;
use sluice_crds::PayloadFormat;

use super::trace::trace_context;
use crate::record::{Payload, Record};

pub enum Decoded {
    Ok(Record),
    /// The record as far as it could be read, and why it cannot be delivered.
    Poison(Record, String),
}

impl Decoded {
    pub fn record(&self) -> &Record {
        match self {
            Decoded::Ok(r) | Decoded::Poison(r, _) => r,
        }
    }
}

/// Takes the message by value: the body moves into the record without a copy.
pub fn decode(message: Message, queue_url: &Arc<str>, format: PayloadFormat, epoch: u64) -> Decoded {
    let attributes: BTreeMap<String, String> = message
        .attributes
        .map(|a| a.into_iter().map(|(k, v)| (k.as_str().to_owned(), v)).collect())
        .unwrap_or_default();
    let sent_attributes = message.message_attributes.unwrap_or_default();
    let attribute_types: BTreeMap<String, String> =
        sent_attributes.iter().map(|(k, v)| (k.clone(), v.data_type().to_owned())).collect();
    let message_attributes: BTreeMap<String, String> =
        sent_attributes.into_iter().map(|(k, v)| (k, attribute_text(&v))).collect();
    let body = Bytes::from(message.body.unwrap_or_default());
    let trace = trace_context(&message_attributes, &attributes);
    let mut record = Record {
        message_id: message.message_id.unwrap_or_default(),
        queue_url: queue_url.clone(),
        sent_timestamp_ms: attributes.get("SentTimestamp").and_then(|t| t.parse().ok()),
        receive_count: attributes.get("ApproximateReceiveCount").and_then(|c| c.parse().ok()).unwrap_or(1),
        group_id: attributes.get("MessageGroupId").cloned(),
        dedup_id: attributes.get("MessageDeduplicationId").cloned(),
        body,
        payload: Payload::Raw,
        attributes,
        message_attributes,
        attribute_types,
        epoch,
        incarnation: 0,
        trace,
        object: None,
    };
    match format {
        PayloadFormat::Raw => Decoded::Ok(record),
        // An S3 event notification is a JSON document too: parsed here, its object fetched
        // next by `payload::Resolver`.
        PayloadFormat::Json | PayloadFormat::S3Notification => match serde_json::from_slice(&record.body) {
            Ok(value) => {
                record.payload = Payload::Json(value);
                Decoded::Ok(record)
            }
            Err(e) => Decoded::Poison(record, format!("payload is not valid JSON: {e}")),
        },
    }
}

/// String and Number attributes as they are; Binary ones base64 encoded.
fn attribute_text(value: &MessageAttributeValue) -> String {
    match (value.string_value(), value.binary_value()) {
        (Some(s), _) => s.to_owned(),
        (None, Some(b)) => aws_smithy_types::base64::encode(b.as_ref()),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::primitives::Blob;
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;

    use super::*;

    fn message(body: &str) -> Message {
        let attr =
            |s: &str| MessageAttributeValue::builder().data_type("String").string_value(s).build().unwrap();
        let bin = MessageAttributeValue::builder()
            .data_type("Binary")
            .binary_value(Blob::new(b"hi".to_vec()))
            .build();
        Message::builder()
            .message_id("m-1")
            .receipt_handle("rh")
            .body(body)
            .attributes(A::SentTimestamp, "1700000000123")
            .attributes(A::ApproximateReceiveCount, "3")
            .attributes(A::MessageGroupId, "g1")
            .message_attributes("kind", attr("order"))
            .message_attributes("blob", bin.unwrap())
            .build()
    }

    #[test]
    fn metadata_travels_with_the_record() {
        let queue: Arc<str> = Arc::from("http://q");
        let Decoded::Ok(r) = decode(message("hello"), &queue, PayloadFormat::Raw, 7) else {
            panic!("poison")
        };
        assert_eq!(r.message_id, "m-1");
        assert_eq!(&r.body[..], b"hello");
        assert_eq!(r.payload, Payload::Raw);
        assert_eq!(r.sent_timestamp_ms, Some(1_700_000_000_123));
        assert_eq!(r.receive_count, 3);
        assert_eq!(r.group_id.as_deref(), Some("g1"));
        assert_eq!(r.attributes["SentTimestamp"], "1700000000123");
        assert_eq!(r.message_attributes["kind"], "order");
        assert_eq!(r.message_attributes["blob"], "aGk=");
        assert_eq!(r.epoch, 7);
        assert_eq!(&*r.queue_url, "http://q");
        assert_eq!(r.trace, None);
    }

    #[test]
    fn the_trace_context_is_carried() {
        let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let m = Message::builder().message_id("m-2").body("x").attributes(A::AwsTraceHeader, xray).build();
        let Decoded::Ok(r) = decode(m, &Arc::from("http://q"), PayloadFormat::Raw, 0) else { panic!() };
        assert_eq!(r.trace.as_deref(), Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"));
    }

    #[test]
    fn json_payloads_are_parsed_and_bad_json_is_poison() {
        let queue: Arc<str> = Arc::from("http://q");
        let Decoded::Ok(r) = decode(message(r#"{"a":1}"#), &queue, PayloadFormat::Json, 0) else { panic!() };
        assert_eq!(r.payload, Payload::Json(serde_json::json!({"a": 1})));
        match decode(message("{not json"), &queue, PayloadFormat::Json, 0) {
            Decoded::Poison(r, reason) => {
                assert_eq!(r.message_id, "m-1");
                assert!(reason.starts_with("payload is not valid JSON"), "{reason}");
            }
            Decoded::Ok(_) => panic!("bad JSON must be poison"),
        }
    }
}
