//! One ReceiveMessage call, with what the reader always asks for and an overall deadline.

use std::time::Duration;

use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::aws::queue::Queue;
use crate::aws::{describe, error_type};
use crate::config::settings::ReceiveSettings;
use crate::process::events::receive::ReceiveError;
use crate::process::metrics::Metrics;

/// Receive once from `queue`; the error says why (`process::events::receive` counts and logs it).
pub async fn receive_once(
    queue: &Queue,
    receive: &ReceiveSettings,
    attempt_id: Option<String>,
    metrics: &Metrics,
) -> Result<ReceiveMessageOutput, ReceiveError> {
    let call = queue
        .client
        .receive_message()
        .queue_url(queue.url.as_ref())
        .max_number_of_messages(receive.max_messages)
        .wait_time_seconds(receive.wait_time_seconds)
        .visibility_timeout(i32::try_from(queue.visibility.as_secs()).unwrap_or(i32::MAX))
        .set_message_system_attribute_names(Some(system_attribute_names(&receive.attribute_names)))
        .set_message_attribute_names(Some(receive.message_attribute_names.clone()))
        .set_receive_request_attempt_id(attempt_id)
        .send();
    // The SDK has no overall deadline; a long poll never legitimately takes much past its wait.
    let limit = Duration::from_secs(receive.wait_time_seconds as u64 + 15);
    let started = tokio::time::Instant::now();
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(out)) => {
            queue.receives.record(started.elapsed(), out.messages().len());
            metrics.receive_call(&queue.url);
            Ok(out)
        }
        Ok(Err(e)) => Err(ReceiveError::Failed { code: error_type(&e), reason: describe(&e) }),
        Err(_) => Err(ReceiveError::Timeout { limit }),
    }
}

/// The spec's names, plus what the reader itself needs (unless `All` already covers it).
fn system_attribute_names(spec: &[String]) -> Vec<MessageSystemAttributeName> {
    let mut names: Vec<MessageSystemAttributeName> =
        spec.iter().map(|n| MessageSystemAttributeName::from(n.as_str())).collect();
    if !names.contains(&MessageSystemAttributeName::All) {
        for needed in [
            MessageSystemAttributeName::SentTimestamp,
            MessageSystemAttributeName::ApproximateReceiveCount,
            MessageSystemAttributeName::MessageGroupId,
            MessageSystemAttributeName::AwsTraceHeader,
        ] {
            if !names.contains(&needed) {
                names.push(needed);
            }
        }
    }
    names
}

/// 1-128 characters of `[a-zA-Z0-9]` and punctuation; 32 alphanumerics suffice.
pub fn random_attempt_id() -> String {
    std::iter::repeat_with(fastrand::alphanumeric).take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_always_asks_for_the_attributes_it_needs() {
        let names = system_attribute_names(&["SenderId".to_string()]);
        assert_eq!(names.len(), 5);
        assert!(names.contains(&MessageSystemAttributeName::SentTimestamp));
        assert_eq!(system_attribute_names(&["All".to_string()]), vec![MessageSystemAttributeName::All]);
    }

    #[test]
    fn attempt_ids_are_fresh_and_well_formed() {
        let (a, b) = (random_attempt_id(), random_attempt_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
