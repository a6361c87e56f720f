//! What a receiver's 2xx answer to a batch request says: every event delivered, or some named
//! as failed.
//!
//! The shape is Lambda's `ReportBatchItemFailures` answer for SQS event sources, which webhook
//! teams that already run Lambda consumers know, plus an optional `reason` per item (our
//! extension, carried to the dead-letter sink):
//!
//! ```json
//! {"batchItemFailures": [{"itemIdentifier": "<event id>", "reason": "price missing"}]}
//! ```
//!
//! Rules, as Lambda's where it has one: an empty body, a body that is not JSON (no JSON content
//! type and not starting with `{`: a receiver that knows nothing of per-item answers, such as
//! `OK`), or a JSON object whose `batchItemFailures` is absent, null or empty, means every event
//! was delivered. An answer that claims to be JSON and cannot be read, an item without an
//! `itemIdentifier`, or one naming no event of the batch, makes the whole batch failed (Lambda
//! does the same): the caller retries every event of it, as it would after a 5xx, since
//! dropping what it cannot read could lose a failure the receiver reported.

use serde::Deserialize;

/// The most of a receiver's reason kept: it travels in WARN lines and a dead-letter attribute.
pub const MAX_REASON_CHARS: usize = 512;

/// A failed event: its index in the batch and the receiver's reason.
pub type FailedItem = (usize, String);

/// Why an answer could not be read, as one line for the WARN and the held reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadAnswer(pub String);

#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "batchItemFailures", default)]
    failures: Option<Vec<Item>>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "itemIdentifier", default)]
    id: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// The events of a batch (`ids`, in the body's order) the receiver failed, from its 2xx answer
/// `body` sent with `content_type`.
pub fn failed_items(
    content_type: Option<&str>,
    body: &[u8],
    ids: &[&str],
) -> Result<Vec<FailedItem>, BadAnswer> {
    let text = body.trim_ascii();
    let json_type = content_type.is_some_and(|ct| {
        let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        essence == "application/json" || essence.ends_with("+json")
    });
    if text.is_empty() || !(json_type || text.starts_with(b"{")) {
        return Ok(Vec::new());
    }
    let answer: Answer = serde_json::from_slice(text).map_err(|e| {
        BadAnswer(format!(
            "the answer is not a JSON object shaped {{\"batchItemFailures\":[{{\"itemIdentifier\":\"<id>\"}}]}} ({e})"
        ))
    })?;
    let mut failed = Vec::new();
    for item in answer.failures.unwrap_or_default() {
        let id = item
            .id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| BadAnswer("an entry of batchItemFailures has no itemIdentifier".to_owned()))?;
        let Some(index) = ids.iter().position(|known| *known == id) else {
            return Err(BadAnswer(format!(
                "batchItemFailures names itemIdentifier {id}, which is no event of this batch of {}",
                ids.len()
            )));
        };
        if failed.iter().all(|(i, _)| *i != index) {
            let mut reason =
                item.reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| "no reason given".to_owned());
            if let Some((cut, _)) = reason.char_indices().nth(MAX_REASON_CHARS) {
                reason.truncate(cut);
            }
            failed.push((index, reason));
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 3] = ["a", "b", "c"];
    const JSON: Option<&str> = Some("application/json");

    fn read(content_type: Option<&str>, body: &str) -> Result<Vec<FailedItem>, BadAnswer> {
        failed_items(content_type, body.as_bytes(), &IDS)
    }

    #[test]
    fn every_event_is_delivered_without_failures_named() {
        for body in [
            "",
            "  \n",
            "OK",
            "<html>fine</html>",
            "{}",
            r#"{"batchItemFailures":null}"#,
            r#"{"batchItemFailures":[]}"#,
            r#"{"processed":3}"#,
        ] {
            assert_eq!(read(None, body), Ok(vec![]), "{body}");
        }
        assert_eq!(read(Some("text/plain"), "[1, 2]"), Ok(vec![]), "not JSON by type or shape");
    }

    #[test]
    fn named_failures_come_back_with_their_index_and_reason() {
        let body = r#"{"batchItemFailures":[{"itemIdentifier":"c","reason":"price missing"},
            {"itemIdentifier":"a"},{"itemIdentifier":"c","reason":"again"}]}"#;
        let failed = read(JSON, body).unwrap();
        assert_eq!(failed, vec![(2, "price missing".to_owned()), (0, "no reason given".to_owned())]);
        let long =
            format!(r#"{{"batchItemFailures":[{{"itemIdentifier":"a","reason":"{}"}}]}}"#, "é".repeat(600));
        assert_eq!(read(JSON, &long).unwrap()[0].1.chars().count(), MAX_REASON_CHARS);
        let typed = read(
            Some("application/vnd.api+json; charset=utf-8"),
            r#" {"batchItemFailures":[{"itemIdentifier":"b"}]}"#,
        );
        assert_eq!(typed, Ok(vec![(1, "no reason given".to_owned())]));
    }

    #[test]
    fn an_answer_that_cannot_be_read_fails_the_whole_batch() {
        let unknown = read(JSON, r#"{"batchItemFailures":[{"itemIdentifier":"zz"}]}"#).unwrap_err();
        assert_eq!(
            unknown.0,
            "batchItemFailures names itemIdentifier zz, which is no event of this batch of 3"
        );
        let missing = read(JSON, r#"{"batchItemFailures":[{"reason":"x"}]}"#).unwrap_err();
        assert_eq!(missing.0, "an entry of batchItemFailures has no itemIdentifier");
        let empty = read(JSON, r#"{"batchItemFailures":[{"itemIdentifier":""}]}"#).unwrap_err();
        assert_eq!(empty, missing);
        for body in [r#"{"batchItemFailures":"a"}"#, "{not json", "[1]"] {
            let bad = read(JSON, body).unwrap_err();
            assert!(bad.0.starts_with("the answer is not a JSON object shaped"), "{body}: {}", bad.0);
        }
    }
}
