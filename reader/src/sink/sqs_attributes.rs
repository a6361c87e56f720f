//! The message attributes the `sqs` sink sends with a record, within SQS's limit of 10.
//!
//! Why pack rather than drop or refuse: a record can carry more than 10 attributes although
//! SQS delivered at most 10, because the reader adds its own (`sluice-s3*` for an object behind
//! an S3 notification, the dead-letter context). Dropping the rest loses user data without a
//! word; refusing the record into the dead-letter route fails again when that route is itself an
//! SQS queue, and turns a forwarding reader into one that dead-letters every such message. So
//! the first 9 (in name order) travel as they are and the rest travel together, as one String
//! attribute [`PACKED`] whose value is a JSON object in SQS's own shape
//! (`{"name": {"DataType": "Number", "StringValue": "7"}, "blob": {"DataType": "Binary",
//! "BinaryValue": "<base64>"}}`), so a consumer unpacks it with the types it would have read.
//! Each packed record is counted (`sluice_reader_sink_attributes_packed_total{sink}`) and named
//! in a rate-limited WARN line. README ("Failure behaviour") documents it for users.

use std::collections::BTreeMap;

use crate::record::Record;

/// SQS's limit on message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;

/// The attribute that carries, as JSON, the attributes beyond the first 9.
pub const PACKED: &str = "sluice-packed-attributes";

/// What the sink sends of a record's attributes.
#[derive(Debug, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// Sent as they are, with their own DataType: every non-empty one when they fit.
    pub direct: Vec<&'a str>,
    /// The rest, when there are more than [`MAX_MESSAGE_ATTRIBUTES`].
    pub packed: Option<Packed>,
}

/// Attributes sent together as the one String attribute [`PACKED`].
#[derive(Debug, PartialEq, Eq)]
pub struct Packed {
    /// Their names, in order (for the WARN line).
    pub names: Vec<String>,
    /// The attribute's value: `{"name": {"DataType": .., "StringValue" | "BinaryValue": ..}}`.
    pub json: String,
}

/// The record's non-empty attributes (SQS refuses empty values) as the sink sends them.
pub fn outgoing(record: &Record) -> Outgoing<'_> {
    let names: Vec<&str> =
        record.message_attributes.iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k.as_str()).collect();
    if names.len() <= MAX_MESSAGE_ATTRIBUTES {
        return Outgoing { direct: names, packed: None };
    }
    // An attribute of the record's own named like the packed one is packed too, never shadowed.
    let (mut direct, mut rest): (Vec<&str>, Vec<&str>) = names.into_iter().partition(|n| *n != PACKED);
    rest.extend(direct.drain(MAX_MESSAGE_ATTRIBUTES - 1..));
    rest.sort_unstable();
    let mut entries = serde_json::Map::new();
    for name in &rest {
        let value = record.message_attributes.get(*name).cloned().unwrap_or_default();
        let data_type = data_type(record, name);
        let field = if data_type.starts_with("Binary") { "BinaryValue" } else { "StringValue" };
        let entry = BTreeMap::from([("DataType", data_type.to_owned()), (field, value)]);
        entries.insert((*name).to_owned(), serde_json::json!(entry));
    }
    let json = serde_json::Value::Object(entries).to_string();
    Outgoing { direct, packed: Some(Packed { names: rest.into_iter().map(str::to_owned).collect(), json }) }
}

/// The DataType the attribute `name` was received with (`String` when unknown).
pub fn data_type<'a>(record: &'a Record, name: &str) -> &'a str {
    record.attribute_types.get(name).map_or("String", String::as_str)
}

/// Bytes SQS counts for the attributes: names, types and values (a Binary value counted as its
/// base64 text: a little more than SQS counts, never less).
pub fn size(record: &Record) -> usize {
    let out = outgoing(record);
    let direct: usize = out
        .direct
        .iter()
        .map(|n| {
            n.len() + record.message_attributes.get(*n).map_or(0, String::len) + data_type(record, n).len()
        })
        .sum();
    direct + out.packed.map_or(0, |p| PACKED.len() + p.json.len() + "String".len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::testing::record;

    fn with_attributes(n: usize) -> Record {
        let mut r = record("m");
        for i in 0..n {
            r.message_attributes.insert(format!("a{i:02}"), format!("v{i}"));
        }
        r
    }

    #[test]
    fn up_to_ten_travel_as_they_are() {
        let r = with_attributes(10);
        let out = outgoing(&r);
        assert_eq!(out.direct.len(), 10);
        assert_eq!(out.packed, None);
        let mut empty = with_attributes(10);
        empty.message_attributes.insert("a99".into(), String::new());
        assert_eq!(outgoing(&empty).packed, None, "an empty value is not sent and takes no room");
    }

    #[test]
    fn beyond_ten_the_first_nine_travel_and_the_rest_are_packed_with_their_types() {
        let mut r = with_attributes(12);
        r.attribute_types.insert("a10".into(), "Number.int".into());
        r.message_attributes.insert("a11".into(), "AAEC".into());
        r.attribute_types.insert("a11".into(), "Binary".into());
        let out = outgoing(&r);
        assert_eq!(out.direct, (0..9).map(|i| format!("a{i:02}")).collect::<Vec<_>>());
        let packed = out.packed.expect("12 attributes pack 3");
        assert_eq!(packed.names, ["a09", "a10", "a11"]);
        let json: serde_json::Value = serde_json::from_str(&packed.json).unwrap();
        assert_eq!(json["a09"], serde_json::json!({"DataType": "String", "StringValue": "v9"}));
        assert_eq!(json["a10"], serde_json::json!({"DataType": "Number.int", "StringValue": "v10"}));
        assert_eq!(json["a11"], serde_json::json!({"DataType": "Binary", "BinaryValue": "AAEC"}));
        assert_eq!(json.as_object().unwrap().len(), 3);
    }

    #[test]
    fn an_attribute_named_like_the_packed_one_is_packed_not_shadowed() {
        let mut r = with_attributes(11);
        r.message_attributes.insert(PACKED.into(), "mine".into());
        let out = outgoing(&r);
        assert!(!out.direct.contains(&PACKED));
        assert_eq!(out.direct.len(), 9);
        let packed = out.packed.unwrap();
        assert_eq!(packed.names.len(), 3, "{:?}", packed.names);
        assert!(packed.names.iter().any(|n| n == PACKED));
    }

    #[test]
    fn the_size_counts_the_packed_attribute() {
        let small = with_attributes(2);
        assert_eq!(size(&small), ("a00".len() + 2 + 6) * 2);
        let big = with_attributes(12);
        let packed = outgoing(&big).packed.unwrap();
        assert_eq!(size(&big), 9 * (3 + 2 + 6) + PACKED.len() + packed.json.len() + 6);
    }
}
