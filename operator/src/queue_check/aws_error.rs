//! One line about a failed AWS call: the operation, the AWS error code and message, or what kept
//! the request from being answered.
//!
//! Why not the SDK's own text: its Display says only "service error" and hides the code, and its
//! `DisplayErrorContext` prints every nested wrapper (hundreds of characters to kilobytes of
//! Debug output). A condition, an Event or a log line needs what failed and the code to look up.

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::error::{one_line, root_cause};

/// `operation` is the AWS API name (`GetQueueAttributes`, `HeadBucket`).
pub fn describe<E, R>(operation: &str, error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("an error without a code");
            match e.message().map(one_line).filter(|m| !m.is_empty()) {
                Some(message) => format!("{operation} returned {code}: {message}"),
                None => format!("{operation} returned {code}"),
            }
        }
        SdkError::TimeoutError(_) => format!("{operation} timed out"),
        SdkError::DispatchFailure(_) => {
            format!("{operation} could not reach the endpoint: {}", root_cause(error))
        }
        SdkError::ResponseError(_) => {
            format!("{operation} got a response it could not read: {}", root_cause(error))
        }
        _ => format!("{operation} failed: {}", root_cause(error)),
    }
}
