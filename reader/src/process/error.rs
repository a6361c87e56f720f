//! The reader's one error type, and how each error ends the process.
//!
//! Why exit codes live here: the harness, the operator and kubelet tell a configuration mistake
//! (fix the spec, do not restart blindly) from a crash (restart) and from `failOnError` (a poison
//! message stopped the reader on purpose) only by the exit code, so the mapping sits next to the
//! errors that cause it.

use std::process::ExitCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot work as written. `field` is a path such as `spec.queues[0].url`.
    #[error("invalid configuration: {field}: {message}")]
    Config { field: String, message: String },

    /// A target could not be reached (network, endpoint down, throttled): an outage, not a
    /// mistake in the spec. Retried with backoff while the reader reports not ready; exit 1 only
    /// if it ends the process some other way.
    #[error("{field}: {message}")]
    Outage { field: String, message: String },

    /// A rejected record with `failOnError: true`.
    #[error("stopped by failOnError: message {message_id} was rejected: {reason}")]
    FailOnError { message_id: String, reason: String },

    #[error("admin server: {0}")]
    Admin(#[source] std::io::Error),

    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Config { field: field.into(), message: message.into() }
    }

    /// 2 bad configuration, 3 stopped by failOnError, 1 anything else (0 is a clean drain).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config { .. } => 2,
            Error::FailOnError { .. } => 3,
            Error::Outage { .. } | Error::Admin(_) | Error::Other(_) => 1,
        }
    }

    /// For `main`'s return value.
    pub fn to_exit(&self) -> ExitCode {
        ExitCode::from(self.exit_code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_cli_contract() {
        assert_eq!(Error::config("spec.queues[0].url", "bad").exit_code(), 2);
        let stopped = Error::FailOnError { message_id: "m".into(), reason: "HTTP 400".into() };
        assert_eq!(stopped.exit_code(), 3);
        assert_eq!(Error::Other("boom".into()).exit_code(), 1);
        let outage =
            Error::Outage { field: "spec.queues[0].endpoint".into(), message: "queue unreachable".into() };
        assert_eq!(outage.exit_code(), 1, "an outage is never a configuration error");
        assert_eq!(
            Error::config("spec.queues[0].url", "not a URL").to_string(),
            "invalid configuration: spec.queues[0].url: not a URL"
        );
    }
}
