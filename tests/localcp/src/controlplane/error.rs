//! API errors as the Kubernetes `Status` objects clients decode.
//!
//! kube-rs turns a non-2xx body into `kube::Error::Api(ErrorResponse)` by reading `code`, `reason` and
//! `message`; controllers branch on `reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`), so
//! every failure of the store carries exactly the reason and code a real server would send.

use serde_json::{Value, json};

/// One field-level cause of an `Invalid` or `Conflict` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Dotted path of the field, such as `spec.receive.maxMessages`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// A failed API call: HTTP code, machine-readable reason, human message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, such as `NotFound`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details.causes`.
    pub causes: Vec<Cause>,
    /// `Status.details.kind` and `.name`: kubectl words an `Invalid` error from them ("The SqsSource
    /// "x" is invalid: …").
    pub subject: Option<Subject>,
}

/// The object an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Kind, such as `SqsSource`.
    pub kind: String,
    /// Object name.
    pub name: String,
}

/// Result of a store operation.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        Self { code, reason, message, causes: Vec::new(), subject: None }
    }

    /// 404: the object (or resource type) does not exist.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    /// 409: create of a name that exists.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"))
    }

    /// 409: optimistic-concurrency failure (stale resourceVersion).
    pub fn conflict(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        )
    }

    /// 409: server-side apply would take fields another manager owns.
    pub fn apply_conflict(causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Apply failed with {} conflicts: {}", causes.len(), list.join("; ")),
        );
        e.causes = causes;
        e
    }

    /// 422: the object is invalid.
    pub fn invalid(kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let mut e = Self::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {}", list.join(", ")));
        e.causes = causes;
        e.subject = Some(Subject { kind: kind.to_owned(), name: name.to_owned() });
        e
    }

    /// 400: the request itself is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    /// 410: a watch asked for history that is no longer retained.
    pub fn expired(rv: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {rv} ({oldest})"))
    }

    /// 405: the verb is not supported on this path.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into())
    }

    /// 413: the request body is larger than the server reads.
    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }

    /// 415: a patch content type the server does not know.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    /// The `Status` object sent as the response body (or as a watch ERROR event's object).
    pub fn to_status(&self) -> Value {
        let causes: Vec<Value> = self
            .causes
            .iter()
            .map(|c| json!({"reason": "FieldValueInvalid", "field": c.field, "message": c.message}))
            .collect();
        let mut details = json!({"causes": causes});
        if let Some(subject) = &self.subject {
            details["kind"] = json!(subject.kind);
            details["name"] = json!(subject.name);
        }
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_code_reason_and_causes() {
        let e = ApiError::invalid(
            "SqsSource",
            "a",
            vec![Cause { field: "spec.x".into(), message: "bad".into() }],
        );
        let s = e.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["details"]["causes"][0]["field"], "spec.x");
        assert_eq!(ApiError::expired(3, 10).to_status()["reason"], "Expired");
    }
}
