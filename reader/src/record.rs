//! A received SQS message as it travels through the pipeline.
//!
//! Shared by intake, delivery, sinks and the ledger. The receipt handle is
//! deliberately absent: only the ledger holds it, so no sink can delete behind its back.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

/// The decoded payload. `Json` keeps the parsed value so JSON sinks need not parse twice.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    Raw,
    Json(serde_json::Value),
}

/// One SQS message plus the metadata that must reach the sink with it.
#[derive(Clone, Debug)]
pub struct Record {
    /// SQS MessageId: the CloudEvents `ce-id`, the FIFO dedup id downstream, the idempotency key.
    pub message_id: String,
    /// Queue the message came from.
    pub queue_url: Arc<str>,
    /// The body exactly as SQS returned it.
    pub body: Bytes,
    pub payload: Payload,
    /// System attributes (SentTimestamp, ApproximateReceiveCount, MessageGroupId, ...).
    pub attributes: BTreeMap<String, String>,
    /// String and Number message attributes (binary ones are base64 encoded).
    pub message_attributes: BTreeMap<String, String>,
    /// The SQS DataType of each message attribute (`Number`, `Binary`, `String.custom`, ...),
    /// so a sink that writes attributes again writes them with their type; an attribute missing
    /// here is a `String` (the dead-letter context, test records).
    pub attribute_types: BTreeMap<String, String>,
    /// Milliseconds since the Unix epoch, from SentTimestamp.
    pub sent_timestamp_ms: Option<i64>,
    /// ApproximateReceiveCount.
    pub receive_count: u32,
    /// FIFO MessageGroupId.
    pub group_id: Option<String>,
    /// FIFO MessageDeduplicationId.
    pub dedup_id: Option<String>,
    /// Checkpoint epoch open when the message was received (0 under at-least-once).
    pub epoch: u64,
    /// The reader incarnation that tagged it with `epoch` (`Incarnation.0`; 0 under
    /// at-least-once). With `epoch` and the pod name it is the record's `EpochKey`: a reader that
    /// was fenced and rejoined may tag the same epoch number again under a new incarnation, and
    /// the two must never share a transaction.
    pub incarnation: u64,
    /// W3C `traceparent` of the trace the message belongs to (from its `traceparent` message
    /// attribute or its converted `AWSTraceHeader`), passed on to HTTP sinks and into log lines.
    pub trace: Option<String>,
    /// An object above `spec.payload.streamAboveBytes`, read by each sink as it delivers the
    /// record. What is delivered is then the object, not `body`, which stays the message as
    /// received (the notification, what a dead-letter sink is sent).
    pub object: Option<Arc<ObjectRef>>,
}

/// A streamed record's object as intake checked it: where it is, which version, how large.
///
/// Why a plain reference here and the reading in `payload`: every stage carries records, so the
/// record sits below them all and names none; a sink that streams opens this reference through
/// the payload stage's reader (`payload::StreamSource::open`, handed to it at build), which
/// holds the S3 client and the fetch bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub bucket: String,
    pub key: String,
    pub version_id: Option<String>,
    pub size: u64,
    pub etag: Option<String>,
    /// `spec.payload.streamAboveBytes`, which the object is above (for the refusal's text).
    pub stream_above_bytes: u64,
}

impl ObjectRef {
    /// `s3://bucket/key`, for messages.
    pub fn at(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// The one-line reason `sink`, of a kind that needs whole bodies, gives for this object.
    pub fn refusal(&self, sink: &str) -> String {
        format!(
            "{} is {} bytes, above spec.payload.streamAboveBytes ({}), and sink {sink} cannot stream it (only http and s3 sinks do): route such objects to an http or s3 sink, or raise streamAboveBytes",
            self.at(),
            self.size,
            self.stream_above_bytes
        )
    }
}

impl Record {
    /// Bytes the record holds in memory.
    pub fn size_bytes(&self) -> usize {
        self.body.len()
    }

    /// Bytes the record delivers: its body, or its streamed object's size (what the rate limit's
    /// bytes/s and the delivered-bytes metrics count).
    pub fn content_bytes(&self) -> u64 {
        self.object.as_ref().map_or(self.body.len() as u64, |o| o.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_object_the_limit_and_the_sink() {
        let object = ObjectRef {
            bucket: "inbox".into(),
            key: "big file.bin".into(),
            version_id: None,
            size: 52_428_800,
            etag: Some("\"e\"".into()),
            stream_above_bytes: 8_388_608,
        };
        let reason = object.refusal("forward");
        assert!(reason.starts_with("s3://inbox/big file.bin is 52428800 bytes"), "{reason}");
        assert!(reason.contains("spec.payload.streamAboveBytes (8388608)"), "{reason}");
        assert!(reason.contains("sink forward cannot stream it"), "{reason}");
        assert!(!reason.contains('\n'));
    }
}
