//! What a failed AWS call means, whichever service, client or binary made it.
//!
//! Why one classifier: sinks, payload fetches, target checks and queue checks must agree that a
//! missing queue or bucket is missing, a refused permission is denied and a throttle or a dropped
//! connection is worth another try; each caller then decides what its class costs (a sink holds
//! the record, a fetch dead-letters a missing object, a check reports a condition). A new class
//! makes the compiler list every caller.
//!
//! Why the SDK's own text is not used: its Display says only "service error" and hides the code,
//! and its `DisplayErrorContext` prints every nested wrapper. A log line, a condition or an Event
//! needs what failed and the code to look up, on one line.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// The four answers a caller acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultClass {
    /// The queue, bucket, object or version does not exist (a code that says so, or HTTP 404).
    Missing,
    /// The caller's identity may not do this, or is not recognised (an access code, or HTTP 403).
    Denied,
    /// Throttled, a passing service fault, a timeout or a connection that failed: try again.
    Transient,
    /// Anything else: a request the service refused for what it says, or one never sent.
    Other,
}

/// How the call failed: the service answered, or why no readable answer came.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Via {
    /// The service answered with an error (its code and HTTP status decide the class).
    Answer,
    /// The call or its connection timed out.
    Timeout,
    /// The connection could not be made or broke.
    Connect,
    /// Some other transport failure, or a response that could not be read.
    Io,
    /// The request could not be built or sent as given (a configuration fault).
    Request,
}

/// One failed call, classified, with its one-line text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsFault {
    pub class: FaultClass,
    pub via: Via,
    /// The service's error code, when it answered with one.
    pub code: Option<String>,
    /// The HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// What [`describe`] says.
    pub text: String,
}

/// Error codes AWS documents as throttling or a passing service fault (any code ending in
/// `Throttled` counts too).
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

/// Codes that say the thing named does not exist, exactly.
const MISSING_CODES: &[&str] = &["NoSuchBucket", "NoSuchKey", "NoSuchVersion", "NotFound"];
/// Parts of codes that say so (SQS spells it `AWS.SimpleQueueService.NonExistentQueue` and
/// `QueueDoesNotExist`).
const MISSING_PARTS: &[&str] = &["NonExistentQueue", "QueueDoesNotExist"];
/// Parts of codes that refuse the identity or its permission.
const DENIED_PARTS: &[&str] =
    &["AccessDenied", "InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClient"];

impl AwsFault {
    /// Classify a failed SDK call.
    pub fn of<E>(error: &SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let via = via(error);
        let code = error.code().map(str::to_owned);
        let status = error.raw_response().map(|r| r.status().as_u16());
        let class = match via {
            Via::Answer => answer_class(code.as_deref(), status),
            Via::Timeout | Via::Connect | Via::Io => FaultClass::Transient,
            Via::Request => FaultClass::Other,
        };
        Self { class, via, code, status, text: describe(error) }
    }

    /// The service's code, or `fallback` (an HTTP status, say) when it gave none.
    pub fn code_or<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.code.as_deref().filter(|c| !c.is_empty()).unwrap_or(fallback)
    }
}

/// The class of a service's error answer: its code first (every AWS service names its faults),
/// then its HTTP status (HeadBucket and HeadObject answer without a body, so the status is all
/// there is).
pub fn answer_class(code: Option<&str>, status: Option<u16>) -> FaultClass {
    if let Some(code) = code.filter(|c| !c.is_empty()) {
        if MISSING_CODES.contains(&code) || MISSING_PARTS.iter().any(|p| code.contains(p)) {
            return FaultClass::Missing;
        }
        if code == "Forbidden" || DENIED_PARTS.iter().any(|p| code.contains(p)) {
            return FaultClass::Denied;
        }
        if TRANSIENT_CODES.contains(&code) || code.ends_with("Throttled") {
            return FaultClass::Transient;
        }
    }
    match status {
        Some(404) => FaultClass::Missing,
        Some(403) => FaultClass::Denied,
        Some(429 | 500 | 502 | 503 | 504) => FaultClass::Transient,
        _ => FaultClass::Other,
    }
}

fn via<E, R>(error: &SdkError<E, R>) -> Via {
    match error {
        SdkError::ServiceError(_) => Via::Answer,
        SdkError::TimeoutError(_) => Via::Timeout,
        SdkError::DispatchFailure(failure) if failure.is_timeout() => Via::Timeout,
        SdkError::DispatchFailure(failure) if failure.is_io() => Via::Connect,
        SdkError::DispatchFailure(failure) if failure.is_user() => Via::Request,
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => Via::Io,
        _ => Via::Request,
    }
}

/// A failed call in one line, without the operation: the service's code and message when it
/// answered, else what kept the request from an answer and the innermost cause.
pub fn describe<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match error {
        SdkError::ServiceError(_) => {
            let code = error.code().filter(|c| !c.is_empty()).unwrap_or("an error without a code");
            match error.message().map(one_line).filter(|m| !m.is_empty()) {
                Some(message) => format!("{code}: {message}"),
                None => code.to_owned(),
            }
        }
        SdkError::TimeoutError(_) => "timed out".to_owned(),
        SdkError::DispatchFailure(_) => format!("could not reach the endpoint: {}", root_cause(error)),
        SdkError::ResponseError(_) => format!("got a response it could not read: {}", root_cause(error)),
        _ => format!("failed: {}", root_cause(error)),
    }
}

/// [`describe`] with the API's name in front (`GetQueueAttributes returned QueueDoesNotExist: ..`,
/// `HeadBucket timed out`).
pub fn describe_call<E, R>(operation: &str, error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match error {
        SdkError::ServiceError(_) => format!("{operation} returned {}", describe(error)),
        _ => format!("{operation} {}", describe(error)),
    }
}

/// A short name for an SDK error, for the `error_type` label of the error counters: the service's
/// code, or the kind of failure.
pub fn error_type<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> String {
    match error {
        SdkError::ServiceError(_) => error.code().unwrap_or("service").to_owned(),
        SdkError::TimeoutError(_) => "timeout".into(),
        SdkError::DispatchFailure(_) => "dispatch".into(),
        SdkError::ResponseError(_) => "response".into(),
        SdkError::ConstructionFailure(_) => "construction".into(),
        _ => "unknown".into(),
    }
}

fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut last = error;
    while let Some(next) = last.source() {
        last = next;
    }
    one_line(&last.to_string())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    #[test]
    fn codes_decide_before_statuses() {
        let cases = [
            (Some("AWS.SimpleQueueService.NonExistentQueue"), Some(400), FaultClass::Missing),
            (Some("QueueDoesNotExist"), Some(400), FaultClass::Missing),
            (Some("NoSuchBucket"), Some(404), FaultClass::Missing),
            (Some("NoSuchKey"), None, FaultClass::Missing),
            (Some("AccessDenied"), Some(403), FaultClass::Denied),
            (Some("KMS.AccessDeniedException"), Some(400), FaultClass::Denied),
            (Some("InvalidClientTokenId"), Some(403), FaultClass::Denied),
            (Some("Forbidden"), None, FaultClass::Denied),
            (Some("ThrottlingException"), Some(400), FaultClass::Transient),
            (Some("KmsThrottled"), Some(400), FaultClass::Transient),
            (Some("SlowDown"), Some(503), FaultClass::Transient),
            (Some("InvalidParameterValue"), Some(400), FaultClass::Other),
            (Some("InvalidObjectState"), Some(403), FaultClass::Denied),
        ];
        for (code, status, want) in cases {
            assert_eq!(answer_class(code, status), want, "{code:?} {status:?}");
        }
    }

    #[test]
    fn a_status_decides_an_answer_without_a_code() {
        assert_eq!(answer_class(None, Some(404)), FaultClass::Missing);
        assert_eq!(answer_class(Some(""), Some(403)), FaultClass::Denied);
        assert_eq!(answer_class(None, Some(503)), FaultClass::Transient);
        assert_eq!(answer_class(None, Some(429)), FaultClass::Transient);
        assert_eq!(answer_class(None, Some(400)), FaultClass::Other);
        assert_eq!(answer_class(None, None), FaultClass::Other);
    }

    fn answer(code: &str, status: u16) -> SdkError<ErrorMetadata, HttpResponse> {
        let meta = ErrorMetadata::builder().code(code).message("the queue\n  is gone").build();
        let response = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::service_error(meta, response)
    }

    #[test]
    fn an_sdk_error_is_classified_with_one_line() {
        let fault = AwsFault::of(&answer("QueueDoesNotExist", 400));
        assert_eq!((fault.class, fault.via, fault.status), (FaultClass::Missing, Via::Answer, Some(400)));
        assert_eq!(fault.text, "QueueDoesNotExist: the queue is gone");
        assert_eq!(
            describe_call("GetQueueAttributes", &answer("QueueDoesNotExist", 400)),
            "GetQueueAttributes returned QueueDoesNotExist: the queue is gone"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let dispatch: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        let fault = AwsFault::of(&dispatch);
        assert_eq!((fault.class, fault.via, fault.code), (FaultClass::Transient, Via::Connect, None));
        assert_eq!(
            describe_call("HeadBucket", &dispatch),
            "HeadBucket could not reach the endpoint: connection refused"
        );
        assert_eq!(error_type(&dispatch), "dispatch");
        let timeout: SdkError<ErrorMetadata, HttpResponse> = SdkError::timeout_error("slow");
        assert_eq!(AwsFault::of(&timeout).class, FaultClass::Transient);
        assert_eq!(describe(&timeout), "timed out");
        let user: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::user("no endpoint".into()));
        assert_eq!((AwsFault::of(&user).class, AwsFault::of(&user).via), (FaultClass::Other, Via::Request));
    }

    #[test]
    fn one_line_squeezes_whitespace() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
