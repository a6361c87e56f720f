//! What an AWS SDK error means for a sink: try again, or stop trying.
//!
//! Why here: the sqs and s3 sinks (and their dead-letter use) must agree that a dropped
//! connection or a throttle is worth another attempt while a missing queue or a denied permission
//! is not; and neither of the latter is the record's fault, so it must not be dead-lettered:
//! the record goes back to the queue (`Outcome::Failed`) and the error reaches the logs. The
//! class itself is the one both binaries use (`sluice_aws::fault`); this maps it onto the sinks'
//! retry policy.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use sluice_aws::{AwsFault, FaultClass, Via};

use super::retry::{AttemptError, Class, RetryPolicy};

/// One failed AWS call, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AwsFailure {
    /// Retry per policy.
    Transient { kind: AttemptError, reason: String },
    /// Retrying will not help and the record is not at fault (configuration, permissions).
    Fatal { reason: String },
}

impl AwsFailure {
    /// Worth another attempt under `policy`?
    pub fn class(&self, policy: &RetryPolicy) -> Class {
        match self {
            Self::Fatal { .. } => Class::Permanent,
            Self::Transient { kind, .. } => policy.classify(kind),
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Self::Transient { reason, .. } | Self::Fatal { reason } => reason,
        }
    }
}

pub fn classify<E>(error: &SdkError<E, HttpResponse>) -> AwsFailure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    from_fault(AwsFault::of(error))
}

/// Transient faults are retried as the kind of attempt error they were; missing, denied and other
/// are not retried.
fn from_fault(fault: AwsFault) -> AwsFailure {
    let reason = fault.text;
    match fault.class {
        FaultClass::Transient => {
            let kind = match fault.via {
                Via::Timeout => AttemptError::Timeout,
                Via::Connect => AttemptError::Connect,
                Via::Io => AttemptError::Io,
                Via::Answer | Via::Request => AttemptError::ServiceFault,
            };
            AwsFailure::Transient { kind, reason }
        }
        FaultClass::Missing | FaultClass::Denied | FaultClass::Other => AwsFailure::Fatal { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: &str) -> AwsFault {
        let class = sluice_aws::fault::answer_class(Some(code), Some(400));
        AwsFault {
            class,
            via: Via::Answer,
            code: Some(code.into()),
            status: Some(400),
            text: format!("{code}: nope"),
        }
    }

    #[test]
    fn throttles_and_service_faults_are_transient() {
        for code in ["ThrottlingException", "RequestThrottled", "KmsThrottled", "InternalError", "SlowDown"] {
            assert_eq!(
                from_fault(answered(code)),
                AwsFailure::Transient { kind: AttemptError::ServiceFault, reason: format!("{code}: nope") }
            );
        }
    }

    #[test]
    fn configuration_errors_are_fatal() {
        for code in
            ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "AccessDenied", "NoSuchBucket"]
        {
            assert_eq!(from_fault(answered(code)), AwsFailure::Fatal { reason: format!("{code}: nope") });
        }
    }

    #[test]
    fn a_dropped_connection_is_retried_as_one() {
        let fault = AwsFault {
            class: FaultClass::Transient,
            via: Via::Connect,
            code: None,
            status: None,
            text: "could not reach the endpoint: refused".into(),
        };
        assert!(matches!(from_fault(fault), AwsFailure::Transient { kind: AttemptError::Connect, .. }));
    }
}
