//! Where the `s3` sink puts an epoch's output, and what one line of it holds.
//!
//! Why a layout of its own: the key is part of the exactly-once protocol, not a detail. The output
//! of an `EpochKey` (pod, incarnation, epoch) is `<prefix>/<pod>/epoch-<E>/<incarnation>.jsonl`,
//! where the incarnation is the reader's `Incarnation` (16 hex digits, new for every start and
//! every rejoin) that tagged the records. The key can be computed from the `EpochKey` alone, so any
//! reader of the source can finish another's committed key; all incarnations of one pod's epoch
//! number share one listing prefix, so that finishing a key finds its pending upload by listing
//! one prefix; and the incarnation in the name keeps a rejoined or restarted pod, which reuses
//! epoch numbers, from ever writing over, or completing by mistake, what an earlier incarnation
//! left behind. Epochs are zero-padded so a listing sorts them in order. Under atLeastOnce (epoch
//! 0) there is no transaction and no reader incarnation: each `deliver` writes
//! `<prefix>/<reader>/direct/<incarnation>-<seq>.jsonl` with the sink's own random incarnation.
//!
//! Buffering, compression and time partitions (`spec.sinks[].s3.buffer`, `compression`,
//! `keyTemplate`) keep that shape: the rendered partition goes between the prefix and the reader,
//! the name ends in `.jsonl`, `.jsonl.gz` or `.jsonl.zst`, and an epoch split into several
//! objects (by the buffer hints, or because its records fall in several partitions) names the
//! second and later ones `<incarnation>-<n>`, so the incarnation still leads every name of its
//! key. With placeholders in the template a key's objects are found by listing from the
//! template's fixed start and matching the last three segments (`<pod>/epoch-<E>/<incarnation>`).
//!
//! Output is JSON lines, one record per line: `messageId`, `queue`, `epoch`, `sentTimestamp`,
//! `groupId`, `attributes` (message attributes) and `body` (the body as text), or `bodyBase64` for a
//! body that is not UTF-8. A streamed object (above `spec.payload.streamAboveBytes`) is always
//! `bodyBase64`: whether it is UTF-8 is not known before its last byte, and by then its first are
//! written. Under exactlyOnce a streamed object whose read fails midway leaves its line closed
//! with `truncated` (the reason) instead of a whole body: such a line holds no record (the
//! message is delivered again, whole, in a later line) and readers skip it.

use serde_json::json;
use sluice_crds::key_template::{self, Piece};
use sluice_crds::{S3Compression, S3KeyTime};

use super::s3_encode::extension;
use crate::record::Record;

/// Where the objects of one sink go: its prefix, partitions and compression.
#[derive(Clone, Debug)]
pub struct Layout {
    prefix: String,
    template: Vec<Piece>,
    key_time: S3KeyTime,
    pub compression: S3Compression,
}

impl Layout {
    /// `template` must have passed `key_template::parse` (the caller names the field).
    pub fn new(prefix: &str, template: Vec<Piece>, key_time: S3KeyTime, compression: S3Compression) -> Self {
        Self { prefix: prefix.trim_matches('/').to_owned(), template, key_time, compression }
    }

    /// The partition `record` goes to (empty without a template).
    pub fn partition(&self, record: &Record) -> String {
        if self.template.is_empty() {
            return String::new();
        }
        let at = match self.key_time {
            S3KeyTime::SentTimestamp => record.sent_timestamp_ms.unwrap_or_else(sluice_protocol::now_ms),
            S3KeyTime::DeliveryTime => sluice_protocol::now_ms(),
        };
        key_template::render(&self.template, at)
    }

    /// `<prefix>/<partition>/`, or empty.
    fn base(&self, partition: &str) -> String {
        [self.prefix.as_str(), partition].iter().filter(|s| !s.is_empty()).map(|s| format!("{s}/")).collect()
    }

    /// An at-least-once object: `<prefix>/<partition>/<reader>/direct/<incarnation>-<seq><ext>`.
    pub fn direct(&self, partition: &str, reader: &str, incarnation: &str, seq: u64) -> String {
        let ext = extension(self.compression);
        format!("{}{reader}/direct/{incarnation}-{seq:010}{ext}", self.base(partition))
    }

    /// Object `n` of an epoch key in `partition`: `<incarnation><ext>` for the first, then
    /// `<incarnation>-<n><ext>`.
    pub fn epoch_object(&self, partition: &str, pod: &str, epoch: u64, incarnation: &str, n: u64) -> String {
        let ext = extension(self.compression);
        let name = if n == 0 { incarnation.to_owned() } else { format!("{incarnation}-{n:06}") };
        format!("{}{reader}/epoch-{epoch:020}/{name}{ext}", self.base(partition), reader = pod)
    }

    /// The partition of a template without placeholders (any instant renders it the same).
    pub fn fixed_partition(&self) -> String {
        key_template::render(&self.template, 0)
    }

    /// Whether every key of an epoch is known without listing (no placeholders).
    pub fn fixed(&self) -> bool {
        self.template.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    /// The prefix to list to find every object of `pod`'s epoch number: its epoch prefix without
    /// placeholders, else the template's fixed start.
    pub fn listing(&self, pod: &str, epoch: u64) -> String {
        if self.fixed() {
            return epoch_prefix(&self.base(&self.fixed_partition()), pod, epoch);
        }
        let start = key_template::fixed_start(&self.template);
        if self.prefix.is_empty() { start } else { format!("{}/{start}", self.prefix) }
    }

    /// The incarnation of `key` if it is an object of `pod`'s epoch number `epoch`.
    pub fn incarnation_of<'k>(&self, key: &'k str, pod: &str, epoch: u64) -> Option<&'k str> {
        let mut segments = key.rsplit('/');
        let (name, epoch_dir, owner) = (segments.next()?, segments.next()?, segments.next()?);
        if owner != pod || epoch_dir != format!("epoch-{epoch:020}") {
            return None;
        }
        let stem = name.strip_suffix(extension(self.compression))?;
        Some(stem.split_once('-').map_or(stem, |(incarnation, _)| incarnation))
    }
}

/// `<prefix>/<pod>/epoch-<E>/`, the listing prefix of one pod's epoch number (all incarnations).
pub fn epoch_prefix(prefix: &str, reader: &str, epoch: u64) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        format!("{reader}/epoch-{epoch:020}/")
    } else {
        format!("{prefix}/{reader}/epoch-{epoch:020}/")
    }
}

/// The object of one epoch key: `incarnation` is the reader's `Incarnation` as text.
#[cfg(test)]
pub fn object_key(prefix: &str, reader: &str, epoch: u64, incarnation: &str) -> String {
    format!("{}{incarnation}.jsonl", epoch_prefix(prefix, reader, epoch))
}

/// An at-least-once object without partitions or compression.
#[cfg(test)]
pub fn direct_key(prefix: &str, reader: &str, incarnation: &str, seq: u64) -> String {
    let prefix = prefix.trim_matches('/');
    let path = format!("{reader}/direct/{incarnation}-{seq:010}.jsonl");
    if prefix.is_empty() { path } else { format!("{prefix}/{path}") }
}

/// A fresh id for the at-least-once objects of one sink instance: hex milliseconds (so they sort
/// by start time) and randomness.
pub fn new_incarnation(now_ms: u64) -> String {
    format!("{now_ms:012x}-{:08x}", fastrand::u32(..))
}

/// Append `record` as one JSON line to `out`. The body is written straight into `out`, never
/// into an intermediate JSON value: a fetched object may be tens of MiB.
pub fn append_line(out: &mut Vec<u8>, record: &Record) {
    append_meta(out, record);
    // A body that is not UTF-8 (a fetched binary object) is kept byte for byte, base64 encoded.
    match std::str::from_utf8(&record.body) {
        Ok(text) => {
            out.reserve(text.len() + 16);
            out.extend_from_slice(br#","body":"#);
            serde_json::to_writer(&mut *out, text).unwrap_or_default();
        }
        Err(_) => {
            out.reserve(record.body.len().div_ceil(3) * 4 + 20);
            out.extend_from_slice(br#","bodyBase64":""#);
            // In pieces of a multiple of 3 bytes (so no padding falls mid-body): the encoded body is
            // never held a second time beside the line.
            for piece in record.body.chunks(3 * 64 * 1024) {
                out.extend_from_slice(aws_smithy_types::base64::encode(piece).as_bytes());
            }
            out.push(b'"');
        }
    }
    out.extend_from_slice(b"}\n");
}

/// The line of a streamed record, written piece by piece: [`StreamedLine::start`] writes what
/// precedes the body, [`StreamedLine::push`] each piece of the object as it arrives, then
/// [`StreamedLine::finish`] or [`StreamedLine::truncate`] closes the line.
#[derive(Default)]
pub struct StreamedLine {
    /// The bytes of the last piece that did not fill a base64 quantum (at most 2).
    carry: Vec<u8>,
}

impl StreamedLine {
    pub fn start(out: &mut Vec<u8>, record: &Record) -> Self {
        append_meta(out, record);
        out.extend_from_slice(br#","bodyBase64":""#);
        Self::default()
    }

    pub fn push(&mut self, out: &mut Vec<u8>, mut piece: &[u8]) {
        if !self.carry.is_empty() {
            let take = (3 - self.carry.len()).min(piece.len());
            self.carry.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            if self.carry.len() < 3 {
                return;
            }
            out.extend_from_slice(aws_smithy_types::base64::encode(&self.carry).as_bytes());
            self.carry.clear();
        }
        let whole = piece.len() / 3 * 3;
        for quanta in piece[..whole].chunks(3 * 64 * 1024) {
            out.extend_from_slice(aws_smithy_types::base64::encode(quanta).as_bytes());
        }
        self.carry.extend_from_slice(&piece[whole..]);
    }

    pub fn finish(self, out: &mut Vec<u8>) {
        out.extend_from_slice(aws_smithy_types::base64::encode(&self.carry).as_bytes());
        out.extend_from_slice(b"\"}\n");
    }

    /// Close a line whose object could not be read to its end: it holds no record.
    pub fn truncate(self, out: &mut Vec<u8>, reason: &str) {
        out.extend_from_slice(br#"","truncated":"#);
        serde_json::to_writer(&mut *out, reason).unwrap_or_default();
        out.extend_from_slice(b"}\n");
    }
}

/// The line's fields before the body, without the closing brace.
fn append_meta(out: &mut Vec<u8>, record: &Record) {
    let meta = json!({
        "messageId": record.message_id,
        "queue": &*record.queue_url,
        "epoch": record.epoch,
        "sentTimestamp": record.sent_timestamp_ms,
        "groupId": record.group_id,
        "attributes": record.message_attributes,
        "attributeTypes": record.attribute_types,
    });
    // Writing a Value built from strings and numbers into a Vec cannot fail.
    serde_json::to_writer(&mut *out, &meta).unwrap_or_default();
    out.pop(); // the closing brace: the body follows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::testing::record;

    #[test]
    fn keys_group_by_reader_and_epoch() {
        assert_eq!(epoch_prefix("out/", "reader-0", 7), "out/reader-0/epoch-00000000000000000007/");
        assert_eq!(epoch_prefix("", "r", 1), "r/epoch-00000000000000000001/");
        assert_eq!(object_key("a/b", "r", 12, "inc"), "a/b/r/epoch-00000000000000000012/inc.jsonl");
        assert!(epoch_prefix("p", "r", 9) < epoch_prefix("p", "r", 10), "epochs sort numerically");
        assert_eq!(direct_key("out/", "r", "inc", 3), "out/r/direct/inc-0000000003.jsonl");
        assert_eq!(direct_key("", "r", "inc", 3), "r/direct/inc-0000000003.jsonl");
    }

    #[test]
    fn partitions_go_between_the_prefix_and_the_reader() {
        let template = key_template::parse("dt={yyyy}-{MM}-{dd}/hour={HH}").unwrap();
        let layout = Layout::new("/out/", template, S3KeyTime::SentTimestamp, S3Compression::Gzip);
        let mut r = record("id-1");
        r.sent_timestamp_ms = Some(1_796_231_100_000);
        let partition = layout.partition(&r);
        assert_eq!(partition, "dt=2026-12-02/hour=17");
        let key = layout.epoch_object(&partition, "r-0", 7, "00ab", 2);
        assert_eq!(key, "out/dt=2026-12-02/hour=17/r-0/epoch-00000000000000000007/00ab-000002.jsonl.gz");
        assert_eq!(layout.incarnation_of(&key, "r-0", 7), Some("00ab"));
        assert_eq!(layout.incarnation_of(&key, "r-0", 8), None);
        assert_eq!(layout.incarnation_of(&key, "r-1", 7), None);
        assert_eq!(layout.listing("r-0", 7), "out/dt=");
        assert_eq!(
            layout.direct(&partition, "r-0", "inc", 3),
            "out/dt=2026-12-02/hour=17/r-0/direct/inc-0000000003.jsonl.gz"
        );
        let plain = Layout::new("out", Vec::new(), S3KeyTime::SentTimestamp, S3Compression::None);
        let first = plain.epoch_object("", "r", 12, "inc", 0);
        assert_eq!(first, object_key("out", "r", 12, "inc"), "the unpartitioned first object keeps its name");
        assert_eq!(plain.listing("r", 12), epoch_prefix("out", "r", 12));
        assert_eq!(plain.incarnation_of(&first, "r", 12), Some("inc"));
        assert_eq!(plain.direct("", "r", "inc", 3), direct_key("out/", "r", "inc", 3));
    }

    #[test]
    fn incarnations_sort_by_start_time() {
        let (a, b) = (new_incarnation(1_000), new_incarnation(2_000));
        assert!(a < b, "{a} {b}");
        assert_ne!(new_incarnation(5), new_incarnation(5), "same start time, different processes");
    }

    #[test]
    fn one_json_line_per_record() {
        let mut out = Vec::new();
        let mut r = record("id-1");
        r.epoch = 3;
        r.message_attributes.insert("kind".into(), "order".into());
        append_line(&mut out, &r);
        append_line(&mut out, &record("id-2"));
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["messageId"], "id-1");
        assert_eq!(lines[0]["body"], "body-id-1");
        assert_eq!(lines[0]["epoch"], 3);
        assert_eq!(lines[0]["attributes"]["kind"], "order");
        assert_eq!(lines[1]["groupId"], serde_json::Value::Null);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn a_streamed_body_in_uneven_pieces_is_the_same_base64_line() {
        let full: Vec<u8> = [0xffu8].into_iter().chain((0..=255u8).cycle().take(1000)).collect();
        let mut binary = record("id-1");
        binary.body = bytes::Bytes::from(full.clone());
        let mut expected = Vec::new();
        append_line(&mut expected, &binary);
        let mut out = Vec::new();
        let mut streamed = record("id-1");
        streamed.body = bytes::Bytes::new();
        let mut line = StreamedLine::start(&mut out, &streamed);
        for piece in [&full[..1], &full[1..2], &full[2..7], &full[7..7], &full[7..500], &full[500..]] {
            line.push(&mut out, piece);
        }
        line.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(expected).unwrap());
    }

    #[test]
    fn a_truncated_streamed_line_is_valid_json_that_says_so() {
        let mut out = Vec::new();
        let mut line = StreamedLine::start(&mut out, &record("id-1"));
        line.push(&mut out, b"abcd");
        line.truncate(&mut out, "reading s3://b/k failed after 4 bytes");
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["truncated"], "reading s3://b/k failed after 4 bytes");
        assert!(out.ends_with(b"}\n"));
    }

    #[test]
    fn binary_bodies_are_kept_as_base64() {
        let mut out = Vec::new();
        let mut r = record("id-1");
        r.body = bytes::Bytes::from_static(&[0xff, 0x00, 0x61]);
        append_line(&mut out, &r);
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["bodyBase64"], "/wBh");
        assert!(line.get("body").is_none());
    }
}
