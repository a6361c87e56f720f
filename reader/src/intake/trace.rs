//! A message's W3C trace context (`traceparent`), so a trace started by the producer continues at
//! the sink and in the reader's log lines.
//!
//! Why two sources: an OpenTelemetry producer sets a `traceparent` message attribute; AWS X-Ray
//! (the SDKs with tracing on, Lambda, API Gateway) sets the `AWSTraceHeader` system attribute in
//! its own format, which carries the same three facts (trace id, parent span id, sampled) and is
//! converted. The message attribute wins when both are present: it is what the producer chose. A
//! value that is not a valid trace context is dropped rather than passed on, since a receiver that
//! parses it would reject the whole request or start a broken trace.

use std::collections::BTreeMap;

/// The message attribute an OpenTelemetry producer sets.
pub const TRACEPARENT: &str = "traceparent";
/// The SQS system attribute X-Ray sets.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// The `traceparent` for a message with these message attributes and system attributes.
pub fn trace_context(
    message_attributes: &BTreeMap<String, String>,
    attributes: &BTreeMap<String, String>,
) -> Option<String> {
    message_attributes
        .get(TRACEPARENT)
        .and_then(|v| valid_traceparent(v.trim()))
        .or_else(|| attributes.get(AWS_TRACE_HEADER).and_then(|v| from_xray(v)))
}

/// `value` if it is a version-00 traceparent (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero),
/// lowercased as the W3C specification requires.
fn valid_traceparent(value: &str) -> Option<String> {
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts.as_slice() else { return None };
    let ok = *version == "00"
        && is_hex_id(trace_id, 32)
        && is_hex_id(parent_id, 16)
        && flags.len() == 2
        && flags.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| value.to_ascii_lowercase())
}

/// An X-Ray header (`Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=1`) as a traceparent. The
/// X-Ray trace id's two hex parts together are the 32-digit W3C trace id. Without a `Parent` there
/// is no span to continue, so no traceparent.
fn from_xray(header: &str) -> Option<String> {
    let mut root = None;
    let mut parent = None;
    let mut sampled = false;
    for field in header.split(';') {
        match field.trim().split_once('=') {
            Some(("Root", v)) => root = Some(v),
            Some(("Parent", v)) => parent = Some(v),
            Some(("Sampled", v)) => sampled = v == "1",
            _ => {}
        }
    }
    let mut root_parts = root?.split('-');
    let (Some("1"), Some(time), Some(unique), None) =
        (root_parts.next(), root_parts.next(), root_parts.next(), root_parts.next())
    else {
        return None;
    };
    let flags = if sampled { "01" } else { "00" };
    valid_traceparent(&format!("00-{time}{unique}-{}-{flags}", parent?))
}

fn is_hex_id(id: &str, digits: usize) -> bool {
    id.len() == digits && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const W3C: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn a_traceparent_attribute_is_taken_as_it_is() {
        assert_eq!(trace_context(&attrs(&[(TRACEPARENT, W3C)]), &attrs(&[])).as_deref(), Some(W3C));
    }

    #[test]
    fn an_xray_header_is_converted() {
        let tp = trace_context(&attrs(&[]), &attrs(&[(AWS_TRACE_HEADER, XRAY)]));
        assert_eq!(tp.as_deref(), Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"));
        let unsampled = XRAY.replace("Sampled=1", "Sampled=0");
        let tp = trace_context(&attrs(&[]), &attrs(&[(AWS_TRACE_HEADER, unsampled.as_str())]));
        assert_eq!(tp.as_deref(), Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"));
    }

    #[test]
    fn the_message_attribute_wins_over_xray() {
        let tp = trace_context(&attrs(&[(TRACEPARENT, W3C)]), &attrs(&[(AWS_TRACE_HEADER, XRAY)]));
        assert_eq!(tp.as_deref(), Some(W3C));
    }

    #[test]
    fn invalid_contexts_are_dropped() {
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert_eq!(trace_context(&attrs(&[(TRACEPARENT, bad)]), &attrs(&[])), None, "{bad}");
        }
        let no_parent = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1";
        assert_eq!(trace_context(&attrs(&[]), &attrs(&[(AWS_TRACE_HEADER, no_parent)])), None);
        // A bad attribute falls back to X-Ray's header.
        let tp = trace_context(&attrs(&[(TRACEPARENT, "garbage")]), &attrs(&[(AWS_TRACE_HEADER, XRAY)]));
        assert!(tp.is_some_and(|t| t.starts_with("00-5759e988")));
    }
}
