//! The sink module's errors: a spec field that cannot work (found while building, exit 2), and a
//! failed epoch step (pre-commit, commit, abort) that the exactly-once layer retries.

/// A spec field that cannot work, and why. `field` is a path such as `spec.sinks[0].http.url`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SinkBuildError {
    pub field: String,
    pub message: String,
}

impl SinkBuildError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self { field: field.to_owned(), message: message.into() }
    }

    /// The same error with its field placed under `parent` (`spec.sinks[2]`).
    pub fn within(self, parent: &str) -> Self {
        let field =
            if self.field.is_empty() { parent.to_owned() } else { format!("{parent}.{}", self.field) };
        Self { field, ..self }
    }
}

/// An epoch step that failed in one sink.
#[derive(Debug, thiserror::Error)]
#[error("sink {sink}: {message}")]
pub struct SinkError {
    pub sink: String,
    pub message: String,
}
