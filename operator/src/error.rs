//! The operator's one error type.
//!
//! Why it separates kinds: `error_policy` must tell an object that cannot work until a user edits
//! it (wait for a change) from a hiccup of the API server (retry with backoff), and the failure
//! metric needs a small, fixed set of reasons rather than free-form messages.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("{}", kube_line(.0))]
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
    /// Every value `metric_label` answers, so the failure counter shows each reason at zero
    /// before the first failure.
    pub const METRIC_LABELS: [&'static str; 8] =
        ["conflict", "forbidden", "rejected", "api_error", "api_unreachable", "build", "render", "gone"];

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

/// One line about a failed Kubernetes API call: kube's own Display of a refusal carries a Debug
/// dump of the whole `Status`, which no one should have to read in an Event or a log line.
pub fn kube_line(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!(
            "the Kubernetes API refused the request: {} (HTTP {} {})",
            status.message.trim(),
            status.code,
            status.reason
        ),
        other => format!("the Kubernetes API could not be reached: {}", root_cause(other)),
    }
}

/// One line about a failed list or watch of SqsSources; a 404 there means the CRD is missing,
/// which deserves the fix rather than the API server's words.
pub fn sources_line(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 404 => {
            "the SqsSource CRD is not installed in this cluster: kubectl apply -f deploy/crds/".to_owned()
        }
        other => kube_line(other),
    }
}

/// [`sources_line`] for a watcher's error (the failed call is inside it).
pub fn watch_line(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as W;
    match error {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => sources_line(e),
        W::WatchError(status) => sources_line(&kube::Error::Api(status.clone())),
        other => one_line(&other.to_string()),
    }
}

/// The innermost cause of an error chain, on one line.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut last = error;
    while let Some(next) = last.source() {
        last = next;
    }
    one_line(&last.to_string())
}

/// Joins lines and squeezes runs of spaces, so a message fits one log line or condition.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Error {
    /// What a person can do about it, for the `ReconcileFailed` Event.
    pub fn remedy(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) if status.is_forbidden() => {
                "grant the operator's ServiceAccount this permission (deploy/operator/clusterrole.yaml); retried every 5 minutes"
            }
            Error::Kube(kube::Error::Api(status)) if status.is_invalid() || status.code == 400 => {
                "an admission rule or the schema refused what the operator wrote: report it with this message; retried every 5 minutes"
            }
            _ if self.is_transient() => "retrying with backoff",
            _ => "retried every 5 minutes",
        }
    }
}

/// How long a permanently failing object waits before it is tried again anyway (a fixed RBAC or
/// admission rule may let it through without the object itself changing).
pub const PERMANENT_FAILURE_REQUEUE: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_one_readable_line_without_a_debug_dump() {
        let status = kube::core::Status::failure(
            "sqssources.sluice.dev \"orders\" is forbidden: User \"x\" cannot patch",
            "Forbidden",
        )
        .with_code(403);
        let error = Error::Kube(kube::Error::Api(Box::new(status)));
        let text = error.to_string();
        assert_eq!(
            text,
            "the Kubernetes API refused the request: sqssources.sluice.dev \"orders\" is forbidden: User \"x\" cannot patch (HTTP 403 Forbidden)"
        );
        assert!(!text.contains("Status {") && !text.contains('\n'));
        assert!(error.remedy().starts_with("grant the operator's ServiceAccount"));
    }

    #[test]
    fn a_missing_crd_says_how_to_install_it() {
        let status =
            kube::core::Status::failure("the server could not find the requested resource", "NotFound")
                .with_code(404);
        let listed = kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)));
        assert_eq!(
            watch_line(&listed),
            "the SqsSource CRD is not installed in this cluster: kubectl apply -f deploy/crds/"
        );
        let conflict = kube::core::Status::failure("too old resource version", "Expired").with_code(410);
        let text = watch_line(&kube::runtime::watcher::Error::WatchError(Box::new(conflict)));
        assert_eq!(
            text,
            "the Kubernetes API refused the request: too old resource version (HTTP 410 Expired)"
        );
    }

    #[test]
    fn one_line_squeezes_whitespace() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
