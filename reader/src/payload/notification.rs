//! S3 event notifications, in every shape they reach a queue: straight from S3, through SNS
//! (wrapped in an SNS envelope, or raw delivery, which is the S3 document itself), and through
//! EventBridge. Pure: a JSON value in, the objects it names out.
//!
//! Why keys are decoded here: S3 URL-encodes the key in a notification (space as `+` or `%20`,
//! everything else as `%xx` of its UTF-8 bytes); the object must be fetched by its real key.
//! EventBridge events carry the key as S3 does in notifications, so the same decoding applies.

use serde_json::Value;

/// One object an event names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectEvent {
    pub bucket: String,
    /// The key as stored (decoded).
    pub key: String,
    pub version_id: Option<String>,
    pub size: Option<u64>,
    pub etag: Option<String>,
    /// `ObjectCreated:Put`, `ObjectRemoved:Delete`, ... (EventBridge's `Object Created` too).
    pub event_name: String,
}

impl ObjectEvent {
    /// Removal events name an object that is gone: their metadata is delivered, no content.
    pub fn is_removal(&self) -> bool {
        self.event_name.starts_with("ObjectRemoved") || self.event_name.starts_with("Object Deleted")
    }
}

/// What a notification asks of the reader.
#[derive(Debug, PartialEq, Eq)]
pub enum Notification {
    /// `s3:TestEvent`, sent once when a notification is configured: acknowledged, not delivered.
    Test,
    Objects(Vec<ObjectEvent>),
}

/// The objects `body` names, or why it is not an S3 event notification.
pub fn parse(body: &Value) -> Result<Notification, String> {
    // SNS envelope: the S3 document is the `Message` string.
    if body.get("Type").and_then(Value::as_str) == Some("Notification")
        && let Some(inner) = body.get("Message").and_then(Value::as_str)
    {
        let inner: Value = serde_json::from_str(inner)
            .map_err(|e| format!("the SNS envelope's Message is not JSON: {e}"))?;
        return parse(&inner);
    }
    if body.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Ok(Notification::Test);
    }
    if let Some(records) = body.get("Records").and_then(Value::as_array) {
        return records.iter().map(s3_record).collect::<Result<_, _>>().map(Notification::Objects);
    }
    if body.get("source").and_then(Value::as_str) == Some("aws.s3") {
        return eventbridge(body).map(|o| Notification::Objects(vec![o]));
    }
    Err("not an S3 event notification (no Records, no s3:TestEvent, no EventBridge aws.s3 event)".into())
}

fn s3_record(record: &Value) -> Result<ObjectEvent, String> {
    let s3 = record.get("s3").ok_or("a record has no s3 member")?;
    let object = s3.get("object").ok_or("a record has no s3.object")?;
    Ok(ObjectEvent {
        bucket: text(s3.pointer("/bucket/name")).ok_or("a record has no s3.bucket.name")?,
        key: decode_key(&text(object.get("key")).ok_or("a record has no s3.object.key")?)?,
        version_id: text(object.get("versionId")).filter(|v| !v.is_empty() && v != "null"),
        size: object.get("size").and_then(Value::as_u64),
        etag: text(object.get("eTag")),
        event_name: text(record.get("eventName")).unwrap_or_default(),
    })
}

fn eventbridge(event: &Value) -> Result<ObjectEvent, String> {
    let detail = event.get("detail").ok_or("an EventBridge S3 event has no detail")?;
    let object = detail.get("object").ok_or("an EventBridge S3 event has no detail.object")?;
    Ok(ObjectEvent {
        bucket: text(detail.pointer("/bucket/name"))
            .ok_or("an EventBridge S3 event has no detail.bucket.name")?,
        key: decode_key(&text(object.get("key")).ok_or("an EventBridge S3 event has no detail.object.key")?)?,
        version_id: text(object.get("version-id")),
        size: object.get("size").and_then(Value::as_u64),
        etag: text(object.get("etag")),
        event_name: text(event.get("detail-type")).unwrap_or_default(),
    })
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

/// A key as S3 encodes it in notifications: `+` is a space, `%xx` a byte of its UTF-8 form.
pub fn decode_key(encoded: &str) -> Result<String, String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(byte.ok_or_else(|| format!("key {encoded:?} has a bad %-escape at byte {i}"))?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("key {encoded:?} does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn s3_event(key: &str) -> Value {
        json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
            "s3": {"bucket": {"name": "b1"}, "object": {"key": key, "size": 5, "eTag": "e1", "versionId": "v1"}}}]})
    }

    fn object(key: &str) -> ObjectEvent {
        ObjectEvent {
            bucket: "b1".into(),
            key: key.into(),
            version_id: Some("v1".into()),
            size: Some(5),
            etag: Some("e1".into()),
            event_name: "ObjectCreated:Put".into(),
        }
    }

    #[test]
    fn keys_are_decoded_as_s3_encodes_them() {
        assert_eq!(decode_key("a+b%2Bc/%C3%A9.txt").unwrap(), "a b+c/é.txt");
        assert_eq!(decode_key("a%20b").unwrap(), "a b");
        assert!(decode_key("bad%2").is_err());
        assert!(decode_key("%FF").is_err());
    }

    #[test]
    fn plain_and_sns_raw_notifications() {
        assert_eq!(parse(&s3_event("a+b")).unwrap(), Notification::Objects(vec![object("a b")]));
    }

    #[test]
    fn sns_wrapped_notifications() {
        let wrapped = json!({"Type": "Notification", "MessageId": "m", "TopicArn": "arn:t",
            "Message": s3_event("k%2B1").to_string()});
        assert_eq!(parse(&wrapped).unwrap(), Notification::Objects(vec![object("k+1")]));
    }

    #[test]
    fn eventbridge_events() {
        let event = json!({"version": "0", "detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b1"}, "object": {"key": "x%20y", "size": 7, "etag": "e", "version-id": "v"},
                "reason": "PutObject"}});
        let Notification::Objects(objects) = parse(&event).unwrap() else { panic!("objects") };
        assert_eq!(objects[0].key, "x y");
        assert_eq!(objects[0].size, Some(7));
        assert_eq!(objects[0].event_name, "Object Created");
        assert!(!objects[0].is_removal());
    }

    #[test]
    fn test_events_and_removals_and_strangers() {
        let test = json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b1"});
        assert_eq!(parse(&test).unwrap(), Notification::Test);
        let mut removal = s3_event("k");
        removal["Records"][0]["eventName"] = json!("ObjectRemoved:Delete");
        let Notification::Objects(objects) = parse(&removal).unwrap() else { panic!("objects") };
        assert!(objects[0].is_removal());
        assert!(parse(&json!({"hello": 1})).unwrap_err().contains("not an S3 event notification"));
    }
}
