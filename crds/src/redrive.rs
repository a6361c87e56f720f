//! A queue's `RedrivePolicy`, as SQS returns it from GetQueueAttributes, and what it means for a
//! source: how many receives a message may spend before SQS moves it to the dead-letter queue.
//!
//! Why here: the reader logs it at start and the operator shows it in `status.queueRedrive`; one
//! parser keeps the two from reading the JSON differently. SQS returns the policy as a JSON
//! string, `{"deadLetterTargetArn":"arn:aws:sqs:...","maxReceiveCount":5}`, where
//! `maxReceiveCount` is a number or, from some tools, a numeric string.

use serde::Deserialize;

use crate::QueueRedrive;

/// The fields of a `RedrivePolicy` Sluice uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// Receives after which SQS moves a message to the dead-letter queue (1-1000).
    pub max_receive_count: u32,
    /// The dead-letter queue's ARN.
    pub dead_letter_target_arn: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    max_receive_count: serde_json::Value,
    #[serde(default)]
    dead_letter_target_arn: String,
}

impl RedrivePolicy {
    /// Parses the attribute's JSON. `Ok(None)` for an absent or empty policy (no redrive);
    /// `Err` with one line of text for a policy that does not say how many receives it allows.
    pub fn parse(json: Option<&str>) -> Result<Option<Self>, String> {
        let Some(json) = json.map(str::trim).filter(|j| !j.is_empty()) else {
            return Ok(None);
        };
        let raw: Raw = serde_json::from_str(json)
            .map_err(|e| format!("RedrivePolicy is not the JSON SQS documents ({e}): {json}"))?;
        let count = match &raw.max_receive_count {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        let max_receive_count = count
            .and_then(|c| u32::try_from(c).ok())
            .filter(|c| *c >= 1)
            .ok_or_else(|| format!("RedrivePolicy maxReceiveCount is not a positive whole number: {json}"))?;
        Ok(Some(Self { max_receive_count, dead_letter_target_arn: raw.dead_letter_target_arn }))
    }

    /// Whether a single receive sends a message to the dead-letter queue: every crash, drain or
    /// failed delivery of a message then dead-letters it.
    pub fn dead_letters_on_first_failure(&self) -> bool {
        self.max_receive_count <= 1
    }

    /// The status entry for the queue at `url`.
    pub fn status(&self, url: &str) -> QueueRedrive {
        QueueRedrive {
            queue: url.to_owned(),
            max_receive_count: Some(self.max_receive_count),
            dead_letter_target_arn: Some(self.dead_letter_target_arn.clone()).filter(|a| !a.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_sqs_returns_is_read() {
        let json =
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":5}"#;
        let policy = RedrivePolicy::parse(Some(json)).unwrap().unwrap();
        assert_eq!(policy.max_receive_count, 5);
        assert_eq!(policy.dead_letter_target_arn, "arn:aws:sqs:us-east-1:000000000000:orders-dlq");
        assert!(!policy.dead_letters_on_first_failure());
        let entry = policy.status("http://q");
        assert_eq!(entry.max_receive_count, Some(5));
        assert_eq!(
            entry.dead_letter_target_arn.as_deref(),
            Some("arn:aws:sqs:us-east-1:000000000000:orders-dlq")
        );
    }

    #[test]
    fn a_count_given_as_a_string_is_read_too() {
        let json = r#"{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:1:d","maxReceiveCount":"1"}"#;
        let policy = RedrivePolicy::parse(Some(json)).unwrap().unwrap();
        assert_eq!(policy.max_receive_count, 1);
        assert!(policy.dead_letters_on_first_failure());
    }

    #[test]
    fn no_policy_is_none() {
        assert_eq!(RedrivePolicy::parse(None), Ok(None));
        assert_eq!(RedrivePolicy::parse(Some("")), Ok(None));
        assert_eq!(RedrivePolicy::parse(Some("  ")), Ok(None));
    }

    #[test]
    fn a_policy_without_a_usable_count_is_an_error_naming_it() {
        for json in [
            "not json",
            r#"{"deadLetterTargetArn":"arn:x"}"#,
            r#"{"deadLetterTargetArn":"arn:x","maxReceiveCount":0}"#,
            r#"{"deadLetterTargetArn":"arn:x","maxReceiveCount":-2}"#,
            r#"{"deadLetterTargetArn":"arn:x","maxReceiveCount":"five"}"#,
        ] {
            let error = RedrivePolicy::parse(Some(json)).unwrap_err();
            assert!(error.starts_with("RedrivePolicy"), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
