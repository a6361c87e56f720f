//! The CloudEvents 1.0 HTTP binary-mode headers for one record.
//!
//! Why by hand and not `cloudevents-sdk`: its 0.9 `reqwest` binding is written against reqwest
//! 0.12, so using it would compile a second reqwest (and its hyper-util/rustls glue) next to the
//! workspace's 0.13, and it builds an intermediate `Event` (with chrono and uuid) per message on the
//! hot path. Binary mode is a handful of `ce-` headers; writing them here keeps them pure and
//! testable, and lets the SQS specifics (message attributes as extensions, the dead-letter reason)
//! follow one rule.
//!
//! Rules (CloudEvents HTTP protocol binding 1.0.2, section 3.1.3): extension attribute names are
//! lowercase ASCII letters and digits, so an SQS message attribute `Trace-Id` becomes
//! `ce-sqstraceid`; attributes named `sluice-*` (set by the dead-letter wrapper) become
//! `ce-sluice*`. Header values percent-encode space, `"`, `%` and everything outside printable
//! ASCII, as the binding requires.

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::record::{Payload, Record};

/// Idempotency key header (IETF draft `Idempotency-Key`), equal to `ce-id`.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The W3C trace context header, carrying the record's `trace`.
pub const TRACEPARENT: &str = "traceparent";

/// The binary-mode headers for `record`, `Content-Type` and `Idempotency-Key` included.
///
/// Built once per delivery attempt, so it avoids per-header allocations where it can: the fixed
/// names are static, a value needing no percent-encoding is not copied first, and `ce-id` and
/// `Idempotency-Key` share one value.
pub fn headers(record: &Record, event_type: &str) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(8 + record.message_attributes.len());
    let mut put = |name: HeaderName, value: HeaderValue| {
        map.entry(name).or_insert(value);
    };
    put(HeaderName::from_static("ce-specversion"), HeaderValue::from_static("1.0"));
    let id = header_value(&record.message_id);
    if let Some(id) = &id {
        put(HeaderName::from_static("ce-id"), id.clone());
    }
    if let Some(source) = header_value(&record.queue_url) {
        put(HeaderName::from_static("ce-source"), source);
    }
    if let Some(kind) = header_value(event_type) {
        put(HeaderName::from_static("ce-type"), kind);
    }
    if let Some(time) = record.sent_timestamp_ms.and_then(rfc3339).as_deref().and_then(header_value) {
        put(HeaderName::from_static("ce-time"), time);
    }
    if let Some(id) = id {
        put(HeaderName::from_static(IDEMPOTENCY_KEY), id);
    }
    // The CloudEvents Distributed Tracing extension: in HTTP binary mode it is the W3C header.
    if let Some(trace) = record.trace.as_deref().and_then(|t| HeaderValue::from_str(t).ok()) {
        put(HeaderName::from_static(TRACEPARENT), trace);
    }
    let mut content_type = None;
    for (name, value) in &record.message_attributes {
        let Some(extension) = extension_name(name) else { continue };
        if extension == "sqscontenttype" {
            content_type = Some(value.as_str());
        }
        if let (Ok(name), Some(value)) =
            (HeaderName::try_from(format!("ce-{extension}")), header_value(value))
        {
            put(name, value);
        }
    }
    let content_type = content_type
        .filter(|v| HeaderValue::from_str(v).is_ok())
        .and_then(header_value)
        .unwrap_or(HeaderValue::from_static(match record.payload {
            Payload::Json(_) => "application/json",
            Payload::Raw => "application/octet-stream",
        }));
    put(CONTENT_TYPE, content_type);
    map
}

/// `value` percent-encoded as the binding requires, as a header value (`None` if it cannot be one,
/// which percent-encoding rules out in practice).
fn header_value(value: &str) -> Option<HeaderValue> {
    if value.bytes().all(passes_unencoded) {
        HeaderValue::from_str(value).ok()
    } else {
        HeaderValue::from_str(&percent_encode(value)).ok()
    }
}

/// Printable ASCII other than `"` and `%` (space is below the range).
fn passes_unencoded(byte: u8) -> bool {
    (0x21..=0x7e).contains(&byte) && byte != b'"' && byte != b'%'
}

/// The CloudEvents extension name for an SQS message attribute, or `None` if nothing of the
/// name survives the lowercase-alphanumeric rule.
pub fn extension_name(attribute: &str) -> Option<String> {
    let (prefix, rest) = match attribute.strip_prefix("sluice-") {
        Some(rest) => ("sluice", rest),
        None => ("sqs", attribute),
    };
    let cleaned: String =
        rest.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    (!cleaned.is_empty()).then(|| format!("{prefix}{cleaned}"))
}

/// Milliseconds since the Unix epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(ms: i64) -> Option<String> {
    use aws_sdk_sqs::primitives::{DateTime, DateTimeFormat};
    DateTime::from_millis(ms).fmt(DateTimeFormat::DateTime).ok()
}

fn percent_encode(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if passes_unencoded(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;

    fn record(payload: Payload, attributes: &[(&str, &str)]) -> Record {
        Record {
            message_id: "0f6b-42".into(),
            queue_url: Arc::from("http://127.0.0.1:4566/queue/us-east-1/000000000000/orders"),
            body: bytes::Bytes::from_static(b"{}"),
            payload,
            attributes: BTreeMap::new(),
            message_attributes: attributes.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            attribute_types: BTreeMap::new(),
            sent_timestamp_ms: Some(1_700_000_000_123),
            receive_count: 1,
            group_id: None,
            dedup_id: None,
            epoch: 0,
            incarnation: 0,
            trace: None,
            object: None,
        }
    }

    fn get<'a>(map: &'a HeaderMap, name: &str) -> Option<&'a str> {
        map.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn required_attributes_and_idempotency_key() {
        let h = headers(&record(Payload::Raw, &[]), "dev.sluice.sqs.message");
        assert_eq!(get(&h, "ce-specversion"), Some("1.0"));
        assert_eq!(get(&h, "ce-id"), Some("0f6b-42"));
        assert_eq!(get(&h, "ce-source"), Some("http://127.0.0.1:4566/queue/us-east-1/000000000000/orders"));
        assert_eq!(get(&h, "ce-type"), Some("dev.sluice.sqs.message"));
        assert_eq!(get(&h, "ce-time"), Some("2023-11-14T22:13:20.123Z"));
        assert_eq!(get(&h, "idempotency-key"), Some("0f6b-42"));
        assert_eq!(get(&h, "content-type"), Some("application/octet-stream"));
    }

    #[test]
    fn the_trace_context_goes_out_as_traceparent() {
        let mut r = record(Payload::Raw, &[]);
        assert_eq!(get(&headers(&r, "t"), "traceparent"), None);
        r.trace = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        assert_eq!(
            get(&headers(&r, "t"), "traceparent"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }

    #[test]
    fn no_sent_timestamp_means_no_time() {
        let mut r = record(Payload::Raw, &[]);
        r.sent_timestamp_ms = None;
        assert_eq!(get(&headers(&r, "t"), "ce-time"), None);
    }

    #[test]
    fn content_type_from_payload_or_attribute() {
        let json = headers(&record(Payload::Json(serde_json::json!({})), &[]), "t");
        assert_eq!(get(&json, "content-type"), Some("application/json"));
        let attr = headers(&record(Payload::Raw, &[("contentType", "text/csv")]), "t");
        assert_eq!(get(&attr, "content-type"), Some("text/csv"));
        assert_eq!(get(&attr, "ce-sqscontenttype"), Some("text/csv"));
    }

    #[test]
    fn message_attributes_become_lowercase_alphanumeric_extensions() {
        let h = headers(
            &record(
                Payload::Raw,
                &[("Trace-Id", "abc"), ("---", "dropped"), ("sluice-dlq-reason", "HTTP 400")],
            ),
            "t",
        );
        assert_eq!(get(&h, "ce-sqstraceid"), Some("abc"));
        assert_eq!(get(&h, "ce-sluicedlqreason"), Some("HTTP%20400"));
        assert_eq!(h.len(), 9, "{h:?}");
    }

    #[test]
    fn attributes_cannot_override_required_headers() {
        assert_eq!(extension_name("id"), Some("sqsid".into()));
        let h = headers(&record(Payload::Raw, &[("a-b", "first"), ("ab", "second")]), "t");
        assert_eq!(get(&h, "ce-sqsab"), Some("first"));
    }

    #[test]
    fn values_are_percent_encoded() {
        assert_eq!(percent_encode("a b\"c%d"), "a%20b%22c%25d");
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode("plain-ASCII_1.0"), "plain-ASCII_1.0");
    }
}
