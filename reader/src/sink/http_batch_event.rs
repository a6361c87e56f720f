//! One record as a structured-mode CloudEvent in JSON, and a batch of them as one request body
//! (CloudEvents JSON Event Format 1.0.2, sections 3 and 4: `application/cloudevents-batch+json`
//! is a JSON array of such events).
//!
//! Why by hand (see `cloudevents` for the SDK): an event is a flat object of string attributes
//! plus its data, so it is written straight into bytes, once per record (a retry sends the same
//! bytes), and the batch body is the events joined: no intermediate value per event.
//!
//! The attributes are those of binary mode: `id` is the SQS MessageId (the idempotency key, as
//! `ce-id` is), `source` the queue URL, `type` `http.eventType`, `time` from SentTimestamp, the
//! W3C `traceparent` (Distributed Tracing extension), and each message attribute as the same
//! lowercase extension (`sqs*`, `sluice*`). The data follows section 3.1.1: a body that is JSON
//! (with no content type, or a JSON one: `application/json`, `*/*+json`) goes as the `data`
//! value, byte for byte; any other body goes as `data_base64`.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::de::IgnoredAny;

use super::cloudevents::{extension_name, rfc3339};
use crate::record::Record;

/// The media type of a batch request.
pub const BATCH_CONTENT_TYPE: &str = "application/cloudevents-batch+json";

/// `record` as one JSON CloudEvent.
pub fn encode(record: &Record, event_type: &str) -> Bytes {
    let mut out = Vec::with_capacity(record.body.len() * 4 / 3 + 256);
    field(&mut out, "specversion", "1.0");
    field(&mut out, "id", &record.message_id);
    field(&mut out, "source", &record.queue_url);
    field(&mut out, "type", event_type);
    if let Some(time) = record.sent_timestamp_ms.and_then(rfc3339) {
        field(&mut out, "time", &time);
    }
    if let Some(trace) = &record.trace {
        field(&mut out, "traceparent", trace);
    }
    let mut content_type = None;
    let mut extensions = BTreeMap::new();
    for (name, value) in &record.message_attributes {
        let Some(extension) = extension_name(name) else { continue };
        if extension == "sqscontenttype" {
            content_type = Some(value.as_str());
        }
        extensions.entry(extension).or_insert(value.as_str());
    }
    for (name, value) in extensions {
        field(&mut out, &name, value);
    }
    if data_is_json(content_type, &record.body) {
        field(&mut out, "datacontenttype", content_type.unwrap_or("application/json"));
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(&record.body);
    } else {
        field(&mut out, "datacontenttype", content_type.unwrap_or("application/octet-stream"));
        field(&mut out, "data_base64", &aws_smithy_types::base64::encode(&record.body));
    }
    out.push(b'}');
    Bytes::from(out)
}

/// The batch body: the events as one JSON array.
pub fn batch_body<'a>(events: impl ExactSizeIterator<Item = &'a Bytes>) -> Bytes {
    let mut out = Vec::new();
    out.push(b'[');
    for (i, event) in events.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(event);
    }
    out.push(b']');
    Bytes::from(out)
}

/// Bytes `event` adds to a batch body that already holds others (its separator included).
pub fn added_bytes(event: &Bytes) -> usize {
    event.len() + 1
}

/// Whether the body goes as the `data` JSON value: no content type or a JSON one, and a body
/// that parses as JSON (checked without building a value).
fn data_is_json(content_type: Option<&str>, body: &[u8]) -> bool {
    let json_type = content_type.is_none_or(|ct| {
        let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        essence == "application/json" || essence == "text/json" || essence.ends_with("+json")
    });
    json_type && !body.is_empty() && serde_json::from_slice::<IgnoredAny>(body).is_ok()
}

/// One `"name":"value"` member, opening the object before the first.
fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(if out.is_empty() { b'{' } else { b',' });
    push_string(out, name);
    out.push(b':');
    push_string(out, value);
}

/// `value` as a JSON string, escaped.
fn push_string(out: &mut Vec<u8>, value: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::sink::testing::record;

    fn parsed(record: &Record) -> Value {
        serde_json::from_slice(&encode(record, "dev.sluice.sqs.message")).expect("valid JSON")
    }

    #[test]
    fn a_json_body_is_the_data_byte_for_byte_with_the_binary_mode_attributes() {
        let mut r = record("m-1");
        r.body = Bytes::from_static(br#"{"b": 2, "a": [1, "x\"y"]}"#);
        r.trace = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        r.message_attributes.insert("Trace-Id".into(), "abc \"q\"".into());
        r.message_attributes.insert("sluice-dlq-reason".into(), "bad".into());
        let event = encode(&r, "t.type");
        let text = std::str::from_utf8(&event).unwrap();
        assert!(text.ends_with(r#","data":{"b": 2, "a": [1, "x\"y"]}}"#), "{text}");
        let v: Value = serde_json::from_slice(&event).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["id"], "m-1");
        assert_eq!(v["source"], "http://127.0.0.1:4566/queue/us-east-1/000000000000/source");
        assert_eq!(v["type"], "t.type");
        assert_eq!(v["time"], "2023-11-14T22:13:20Z");
        assert_eq!(v["datacontenttype"], "application/json");
        assert_eq!(v["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(v["sqstraceid"], "abc \"q\"");
        assert_eq!(v["sluicedlqreason"], "bad");
    }

    #[test]
    fn other_bodies_go_as_base64() {
        let mut r = record("m-2");
        r.body = Bytes::from_static(b"\x00\xffnot json");
        let v = parsed(&r);
        assert_eq!(v["data_base64"], "AP9ub3QganNvbg==");
        assert_eq!(v["datacontenttype"], "application/octet-stream");
        assert!(v.get("data").is_none());
        r.body = Bytes::from_static(b"[1,2]");
        r.message_attributes.insert("contentType".into(), "text/csv".into());
        let v = parsed(&r);
        assert_eq!(v["data_base64"], "WzEsMl0=", "a non-JSON content type is not read as JSON");
        assert_eq!(v["datacontenttype"], "text/csv");
        r.message_attributes
            .insert("contentType".into(), "application/cloudevents+json; charset=utf-8".into());
        assert_eq!(parsed(&r)["data"], json!([1, 2]));
    }

    #[test]
    fn no_time_without_a_sent_timestamp_and_colliding_extensions_keep_the_first() {
        let mut r = record("m-3");
        r.sent_timestamp_ms = None;
        r.message_attributes.insert("a-b".into(), "first".into());
        r.message_attributes.insert("ab".into(), "second".into());
        let v = parsed(&r);
        assert!(v.get("time").is_none());
        assert_eq!(v["sqsab"], "first");
    }

    #[test]
    fn a_batch_is_a_json_array_of_the_events_and_its_size_is_known_in_advance() {
        let events: Vec<Bytes> = ["a", "b", "c"].iter().map(|id| encode(&record(id), "t")).collect();
        let body = batch_body(events.iter());
        let v: Value = serde_json::from_slice(&body).unwrap();
        let ids: Vec<&str> = v.as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(body.len(), 1 + events.iter().map(added_bytes).sum::<usize>());
        assert_eq!(&batch_body(std::iter::empty())[..], b"[]");
    }
}
