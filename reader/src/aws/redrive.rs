//! The queue's `RedrivePolicy`, told at start: how many receives a message may spend before SQS
//! moves it to the queue's dead-letter queue, and what this reader still spends of them.
//!
//! Why at start and in words: the count is the queue's, not the source's, and a reader spends
//! receives it cannot avoid (README, "Failure behaviour"): a drain on SIGTERM releases what it
//! holds, a crash leaves it to the visibility timeout, a delivery the message itself fails is
//! released with a backoff. With maxReceiveCount 1 each of these dead-letters the message, so
//! that case is a WARN line rather than an INFO one.

use sluice_crds::RedrivePolicy;

/// One line about `queue`'s redrive policy (the attribute's raw JSON, if any), and whether it is
/// a warning.
pub fn describe(queue: &str, policy: Option<&str>) -> (bool, String) {
    match RedrivePolicy::parse(policy) {
        Ok(None) => (
            false,
            format!(
                "queue {queue} has no RedrivePolicy: SQS never moves its messages to a dead-letter queue"
            ),
        ),
        Ok(Some(p)) if p.dead_letters_on_first_failure() => (
            true,
            format!(
                "queue {queue} has a RedrivePolicy with maxReceiveCount 1: a message this reader received but did not delete (a drain on SIGTERM, a crash, a failed delivery) goes to {} on its next receive; raise maxReceiveCount on the queue (3 or more)",
                p.dead_letter_target_arn
            ),
        ),
        Ok(Some(p)) => (
            false,
            format!(
                "queue {queue}: RedrivePolicy maxReceiveCount {} into {}; a drain or a crash spends one receive of each message held, a delivery the message fails one per attempt",
                p.max_receive_count, p.dead_letter_target_arn
            ),
        ),
        Err(error) => (true, format!("queue {queue}: {error}")),
    }
}

/// Logs [`describe`]'s line at INFO, or WARN.
pub fn log(queue: &str, policy: Option<&str>) {
    match describe(queue, policy) {
        (true, line) => tracing::warn!(queue, "{line}"),
        (false, line) => tracing::info!(queue, "{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_receive_count_one_warns_and_names_the_dead_letter_queue() {
        let json = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:orders-dlq","maxReceiveCount":1}"#;
        let (warn, line) = describe("orders", Some(json));
        assert!(warn);
        assert!(
            line.contains("maxReceiveCount 1") && line.contains("arn:aws:sqs:us-east-1:1:orders-dlq"),
            "{line}"
        );
    }

    #[test]
    fn other_counts_and_no_policy_are_told_without_a_warning() {
        let json = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:orders-dlq","maxReceiveCount":5}"#;
        let (warn, line) = describe("orders", Some(json));
        assert!(!warn);
        assert!(line.contains("maxReceiveCount 5 into arn:aws:sqs:us-east-1:1:orders-dlq"), "{line}");
        let (warn, line) = describe("orders", None);
        assert!(!warn && line.contains("no RedrivePolicy"), "{line}");
    }

    #[test]
    fn an_unreadable_policy_warns_with_the_reason() {
        let (warn, line) = describe("orders", Some("{}"));
        assert!(warn && line.starts_with("queue orders: RedrivePolicy"), "{line}");
    }
}
