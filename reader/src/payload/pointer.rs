//! Amazon SQS Extended Client pointers: a body that names the S3 object holding the real body.
//!
//! Two shapes are written in practice. The Java client and the current Python client
//! (`amazon-sqs-extended-client`) write the `payloadoffloading` pointer, a two-element JSON array
//! of the class name and `{"s3BucketName", "s3Key"}`; older clients wrote the bare object with a
//! `SQSLargePayloadSize` message attribute. The class name makes the first shape unambiguous; the
//! bare object counts as a pointer only with a size attribute beside it, so an ordinary JSON body
//! that happens to have those two fields is not taken for one.

use std::collections::BTreeMap;

use serde_json::Value;

/// The class name the Java and Python clients write as the first element.
pub const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
/// The class name of the Java client's first generation (`amazon-sqs-java-extended-client-lib`
/// 1.x), which the Python client still writes with `use_legacy_attribute`.
pub const LEGACY_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";
/// The message attribute carrying the original body's size (current clients).
pub const SIZE_ATTRIBUTE: &str = "ExtendedPayloadSize";
/// The same, as older clients (and `useLegacyReservedAttributeName`) name it.
pub const LEGACY_SIZE_ATTRIBUTE: &str = "SQSLargePayloadSize";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    pub bucket: String,
    pub key: String,
}

/// The pointer `body` is, if it is one.
pub fn parse(body: &[u8], message_attributes: &BTreeMap<String, String>) -> Option<Pointer> {
    // Cheap test first: most bodies are not pointers and need not be parsed.
    let looks_like = body.len() < 4096 && body.windows(12).any(|w| w == b"s3BucketName");
    if !looks_like {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = match &value {
        Value::Array(items)
            if items.len() == 2
                && matches!(items[0].as_str(), Some(POINTER_CLASS | LEGACY_POINTER_CLASS)) =>
        {
            &items[1]
        }
        Value::Object(_) if has_size_attribute(message_attributes) => &value,
        _ => return None,
    };
    Some(Pointer {
        bucket: object.get("s3BucketName")?.as_str()?.to_owned(),
        key: object.get("s3Key")?.as_str()?.to_owned(),
    })
}

pub fn has_size_attribute(message_attributes: &BTreeMap<String, String>) -> bool {
    message_attributes.contains_key(SIZE_ATTRIBUTE) || message_attributes.contains_key(LEGACY_SIZE_ATTRIBUTE)
}

/// The pointer body the Java and Python clients read.
pub fn write(bucket: &str, key: &str) -> String {
    serde_json::json!([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(names: &[&str]) -> BTreeMap<String, String> {
        names.iter().map(|n| ((*n).to_owned(), "300".to_owned())).collect()
    }

    #[test]
    fn the_class_pointer_is_read_with_or_without_the_attribute() {
        let body = write("big", "3f2a-key");
        let want = Pointer { bucket: "big".into(), key: "3f2a-key".into() };
        assert_eq!(parse(body.as_bytes(), &attrs(&[SIZE_ATTRIBUTE])), Some(want.clone()));
        assert_eq!(parse(body.as_bytes(), &attrs(&[])), Some(want.clone()));
        let legacy = body.replace(POINTER_CLASS, LEGACY_POINTER_CLASS);
        assert_eq!(parse(legacy.as_bytes(), &attrs(&[LEGACY_SIZE_ATTRIBUTE])), Some(want));
    }

    #[test]
    fn the_bare_object_needs_a_size_attribute() {
        let body = br#"{"s3BucketName":"b","s3Key":"k"}"#;
        assert_eq!(parse(body, &attrs(&[])), None);
        assert_eq!(
            parse(body, &attrs(&[LEGACY_SIZE_ATTRIBUTE])),
            Some(Pointer { bucket: "b".into(), key: "k".into() })
        );
    }

    #[test]
    fn ordinary_bodies_are_not_pointers() {
        assert_eq!(parse(b"hello", &attrs(&[SIZE_ATTRIBUTE])), None);
        assert_eq!(parse(br#"["other.Class",{"s3BucketName":"b","s3Key":"k"}]"#, &attrs(&[])), None);
    }
}
