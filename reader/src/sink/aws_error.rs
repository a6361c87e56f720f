//! What an AWS SDK error means for a sink: try again, or stop trying.
//!
//! Why one place: the sqs and s3 sinks (and their dead-letter use) must agree that a dropped
//! connection or a throttle is worth another attempt while a missing queue or a denied permission
//! is not; and neither of the latter is the record's fault, so it must not be dead-lettered:
//! the record goes back to the queue (`Outcome::Failed`) and the error reaches the logs.

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use super::retry::{AttemptError, Class, RetryPolicy};
use crate::aws::describe;

/// Error codes that AWS documents as throttling or a passing service fault.
const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "RequestTimeout",
    "RequestTimeoutException",
    "KmsThrottled",
];

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

pub fn classify<E, R>(error: &SdkError<E, R>) -> AwsFailure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let reason = describe(error);
    match error {
        SdkError::TimeoutError(_) => AwsFailure::Transient { kind: AttemptError::Timeout, reason },
        SdkError::DispatchFailure(failure) => {
            let kind = if failure.is_timeout() {
                AttemptError::Timeout
            } else if failure.is_io() {
                AttemptError::Connect
            } else if failure.is_user() {
                return AwsFailure::Fatal { reason };
            } else {
                AttemptError::Io
            };
            AwsFailure::Transient { kind, reason }
        }
        SdkError::ResponseError(_) => AwsFailure::Transient { kind: AttemptError::Io, reason },
        SdkError::ServiceError(_) => service_failure(error.code(), reason),
        _ => AwsFailure::Fatal { reason },
    }
}

/// A service's answer, from its error code (HTTP status is not exposed uniformly across
/// services, and every AWS service names its transient faults).
pub fn service_failure(code: Option<&str>, reason: String) -> AwsFailure {
    match code {
        Some(code) if TRANSIENT_CODES.contains(&code) || code.ends_with("Throttled") => {
            AwsFailure::Transient { kind: AttemptError::ServiceFault, reason }
        }
        _ => AwsFailure::Fatal { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_and_service_faults_are_transient() {
        for code in ["ThrottlingException", "RequestThrottled", "KmsThrottled", "InternalError", "SlowDown"] {
            assert!(
                matches!(service_failure(Some(code), code.into()), AwsFailure::Transient { .. }),
                "{code}"
            );
        }
    }

    #[test]
    fn configuration_errors_are_fatal() {
        for code in
            ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "AccessDenied", "NoSuchBucket"]
        {
            let failure = service_failure(Some(code), format!("{code}: nope"));
            assert_eq!(failure, AwsFailure::Fatal { reason: format!("{code}: nope") });
        }
        assert!(matches!(service_failure(None, "?".into()), AwsFailure::Fatal { .. }));
    }
}
