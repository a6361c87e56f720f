//! Pure judgements of a queue's attributes against the spec.
//!
//! Why these checks: each is a way a source can look healthy and still lose or duplicate work.
//! - FIFO mismatch: the reader would handle ordering and deduplication wrongly.
//! - Visibility timeout: a message whose visibility lapses before it is deleted is delivered
//!   again. Under exactlyOnce a message may wait for its epoch to close and be committed, up to two
//!   checkpoint intervals, before its delete. Under atLeastOnce the reader extends visibility
//!   while it works, but one sink attempt must still fit inside it.
//! - No redrive policy and no dead-letter sink: a poison message is received forever.
//! - A redrive policy with maxReceiveCount 1: every receive a reader spends without deleting
//!   (a drain, a crash, a failed delivery) moves the message to the dead-letter queue.
//! - The maximum message size is reported so users can size their sinks.

use sluice_crds::{Guarantee, QueueRef, RedrivePolicy, SqsSourceSpec};

use super::QueueAttributes;

/// Slack added on top of the time a message must stay invisible.
pub const VISIBILITY_MARGIN_SECONDS: i64 = 10;
/// Below this the reader's visibility heartbeat cannot keep up.
pub const MIN_VISIBILITY_SECONDS: i64 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The source cannot work as specified: QueueConfigValid=False.
    Error,
    /// The source works but is fragile: QueueConfigValid stays True, with a Warning event.
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub reason: &'static str,
    pub message: String,
}

/// Whether the spec names a FIFO queue (its name ends in `.fifo`).
pub fn spec_is_fifo(queue: &QueueRef) -> bool {
    queue.url.as_deref().or(queue.name.as_deref()).is_some_and(|s| s.ends_with(".fifo"))
}

/// The visibility timeout the spec needs, and the reason in words.
pub fn required_visibility(spec: &SqsSourceSpec) -> (i64, String) {
    if spec.delivery.guarantee == Guarantee::ExactlyOnce
        && let Some(interval) = spec.delivery.checkpoint_interval_seconds
    {
        let needed = 2 * i64::from(interval.max(0)) + VISIBILITY_MARGIN_SECONDS;
        return (
            needed,
            format!(
                "exactlyOnce with checkpointIntervalSeconds {interval} needs 2 x interval + {VISIBILITY_MARGIN_SECONDS} s"
            ),
        );
    }
    let slowest_sink_ms = spec
        .sinks
        .iter()
        .chain(spec.dead_letter_sink.iter())
        .filter_map(|s| s.http.as_ref().map(|h| h.timeout_ms))
        .max()
        .unwrap_or(0);
    let sink_seconds = i64::try_from(slowest_sink_ms.div_ceil(1000)).unwrap_or(i64::MAX);
    let needed = sink_seconds.saturating_add(VISIBILITY_MARGIN_SECONDS).max(MIN_VISIBILITY_SECONDS);
    (needed, format!("one sink attempt ({sink_seconds} s) plus {VISIBILITY_MARGIN_SECONDS} s must fit"))
}

/// Checks one queue (entry `index` of `spec.queues`) against its attributes.
pub fn check_queue(spec: &SqsSourceSpec, index: usize, label: &str, attrs: &QueueAttributes) -> Vec<Finding> {
    let mut findings = Vec::new();
    let Some(queue) = spec.queues.get(index) else {
        return findings;
    };
    let wants_fifo = spec_is_fifo(queue);
    if wants_fifo != attrs.fifo {
        let (is, named) = if attrs.fifo {
            ("a FIFO queue", "a standard queue")
        } else {
            ("a standard queue", "a FIFO queue")
        };
        findings.push(Finding {
            severity: Severity::Error,
            reason: "FifoMismatch",
            message: format!(
                "queue {label} is {is} but spec.queues[{index}] names {named}: fix the url or name (FIFO names end in .fifo)"
            ),
        });
    }

    let (needed, why) = required_visibility(spec);
    let (effective, from_spec) = match spec.receive.visibility_timeout_seconds {
        Some(v) => (i64::from(v), true),
        None => (attrs.visibility_timeout_seconds, false),
    };
    if effective < needed {
        let what = if from_spec {
            format!("raise spec.receive.visibilityTimeoutSeconds to at least {needed}")
        } else {
            format!(
                "raise the queue's VisibilityTimeout to at least {needed}, or set spec.receive.visibilityTimeoutSeconds"
            )
        };
        let lower = if spec.delivery.guarantee == Guarantee::ExactlyOnce {
            let max_interval = (effective - VISIBILITY_MARGIN_SECONDS) / 2;
            if max_interval >= 1 {
                format!(", or lower spec.delivery.checkpointIntervalSeconds to {max_interval}")
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        findings.push(Finding {
            severity: Severity::Error,
            reason: "VisibilityTimeoutTooShort",
            message: format!(
                "queue {label}: visibility timeout {effective} s is shorter than {needed} s ({why}): {what}{lower}"
            ),
        });
    }

    findings.extend(kms_key(index, label, attrs));
    findings.extend(redrive(index, label, attrs));
    if attrs.redrive_policy.as_deref().is_none_or(str::is_empty) && spec.dead_letter_sink.is_none() {
        findings.push(Finding {
            severity: Severity::Warning,
            reason: "NoDeadLetter",
            message: format!(
                "queue {label} has no RedrivePolicy and the source has no deadLetterSink: a poison message is retried forever; add spec.deadLetterSink or a redrive policy on the queue"
            ),
        });
    }
    findings
}

/// A redrive policy that dead-letters a message on its first receive, or one that cannot be read.
fn redrive(index: usize, label: &str, attrs: &QueueAttributes) -> Option<Finding> {
    match RedrivePolicy::parse(attrs.redrive_policy.as_deref()) {
        Ok(Some(policy)) if policy.dead_letters_on_first_failure() => Some(Finding {
            severity: Severity::Warning,
            reason: "MaxReceiveCountOne",
            message: format!(
                "queue {label} (spec.queues[{index}]) has a RedrivePolicy with maxReceiveCount 1: a message a reader received but did not delete (a drain on SIGTERM, a crash, a failed delivery) goes to {} on its next receive; raise maxReceiveCount on the queue (3 or more)",
                policy.dead_letter_target_arn
            ),
        }),
        Ok(_) => None,
        Err(error) => Some(Finding {
            severity: Severity::Warning,
            reason: "RedrivePolicyUnreadable",
            message: format!("queue {label} (spec.queues[{index}]): {error}"),
        }),
    }
}

/// The AWS-managed key for SQS: usable by any identity of the account that may use the queue.
const AWS_MANAGED_SQS_KEY: &str = "alias/aws/sqs";

/// A queue encrypted with a customer-managed KMS key: the readers receive only if their identity
/// may `kms:Decrypt` with it, which neither SQS nor IAM lets the operator test (Decrypt needs a
/// ciphertext, and simulating the readers' policy needs `iam:SimulatePrincipalPolicy` on an
/// identity the operator may not know). So the key and the permission are named up front, as a
/// warning, rather than found by the readers' first failed receive (`KMS.AccessDeniedException`).
fn kms_key(index: usize, label: &str, attrs: &QueueAttributes) -> Option<Finding> {
    let key = attrs.kms_master_key_id.as_deref().filter(|k| *k != AWS_MANAGED_SQS_KEY)?;
    Some(Finding {
        severity: Severity::Warning,
        reason: "QueueEncryptedWithKmsKey",
        message: format!(
            "queue {label} (spec.queues[{index}]) is encrypted with KMS key {key}: the readers' identity needs kms:Decrypt on that key (in its IAM policy and the key policy), or every receive fails with KMS.AccessDeniedException; see docs/eks.md"
        ),
    })
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
