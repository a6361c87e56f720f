//! The error every entry point into the SqsSource API returns.
//!
//! One list of violations rather than the first failure, so a user fixes a manifest in one pass;
//! each line names the field path, the rule, and what to change.

use std::fmt;

/// One problem with a manifest: where it is and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Field path such as `spec.queues[0].url`; empty for the document as a whole.
    pub path: String,
    /// What is wrong and what to change.
    pub message: String,
    /// The CEL rule that failed, for violations of `x-kubernetes-validations`.
    pub rule: Option<String>,
}

impl Violation {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into(), rule: None }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// An SqsSource manifest was rejected; `Display` prints one violation per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.violations))]
pub struct SpecError {
    violations: Vec<Violation>,
}

impl SpecError {
    pub(crate) fn new(violations: Vec<Violation>) -> Self {
        debug_assert!(!violations.is_empty(), "a SpecError always holds a violation");
        Self { violations }
    }

    /// Every violation found, in document order within each validation stage.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Whether some violation is reported at `path` (exactly).
    pub fn has_path(&self, path: &str) -> bool {
        self.violations.iter().any(|v| v.path == path)
    }
}

fn render(violations: &[Violation]) -> String {
    violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}
