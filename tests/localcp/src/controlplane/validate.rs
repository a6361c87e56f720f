//! Admission validation hooks keyed by group and kind.
//!
//! A real cluster validates custom resources with the CRD's OpenAPI schema and CEL rules, which this
//! harness does not interpret. Instead the test or demo registers a Rust function per kind (the lead
//! wires `sluice_crds::validate::validate_source_value` for `sluice.dev/SqsSource`), so invalid objects
//! are refused with the same `422 Invalid` a cluster would send, listing each field's problem.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::error::Cause;

/// Checks a whole object about to be stored; `Err` lists the invalid fields.
pub type ValidateFn = Arc<dyn Fn(&Value) -> Result<(), Vec<Cause>> + Send + Sync>;

/// Validators by `(group, kind)`.
#[derive(Clone, Default)]
pub struct Validators(HashMap<(String, String), ValidateFn>);

impl std::fmt::Debug for Validators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl Validators {
    /// Registers (or replaces) the validator of a kind.
    pub fn insert(&mut self, group: &str, kind: &str, f: ValidateFn) {
        self.0.insert((group.to_owned(), kind.to_owned()), f);
    }

    /// Runs the kind's validator, if any.
    pub fn check(&self, group: &str, kind: &str, obj: &Value) -> Result<(), Vec<Cause>> {
        match self.0.get(&(group.to_owned(), kind.to_owned())) {
            Some(f) => f(obj),
            None => Ok(()),
        }
    }
}
