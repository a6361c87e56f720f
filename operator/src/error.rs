//! The operator's one error type.
//!
//! Why it separates kinds: `error_policy` must tell an object that cannot work until a user edits
//! it (wait for a change) from a hiccup of the API server (retry with backoff), and the failure
//! metric needs a small, fixed set of reasons rather than free-form messages.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes api: {0}")]
    Kube(#[from] kube::Error),
    /// The object cannot be turned into children (no name, namespace or uid yet).
    #[error("cannot build children: {0}")]
    Build(String),
    /// The source's YAML could not be rendered for the reader.
    #[error("cannot render the source for the reader: {0}")]
    Render(String),
    /// The source is gone, was replaced by another of the same name, or is being deleted: the
    /// reconcile stops without writing anything (not a failure).
    #[error("the source is gone or being deleted")]
    SourceGone,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Low-cardinality label for `reconcile_failures_total{reason}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) if status.is_conflict() => "conflict",
            Error::Kube(kube::Error::Api(status)) if status.is_forbidden() => "forbidden",
            Error::Kube(kube::Error::Api(status)) if status.is_invalid() => "rejected",
            Error::Kube(kube::Error::Api(_)) => "api_error",
            Error::Kube(_) => "api_unreachable",
            Error::Build(_) => "build",
            Error::Render(_) => "render",
            Error::SourceGone => "gone",
        }
    }

    /// Whether retrying without a change to the object can help.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(status)) => {
                !(status.is_invalid() || status.code == 400 || status.is_forbidden())
            }
            Error::Kube(_) => true,
            Error::Build(_) | Error::Render(_) | Error::SourceGone => false,
        }
    }
}

/// How long a permanently failing object waits before it is tried again anyway (a fixed RBAC or
/// admission rule may let it through without the object itself changing).
pub const PERMANENT_FAILURE_REQUEUE: Duration = Duration::from_secs(300);
