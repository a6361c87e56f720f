//! Test fixtures: SqsSources from `tests/fixtures/*.yaml`, compiled in so tests need no paths.
//!
//! Why YAML files rather than Rust builders: they are what a user writes, so `build()` is tested
//! from the same shape `kubectl apply` sends.

use sluice_crds::SqsSource;

pub const BASIC: &str = include_str!("../tests/fixtures/basic.yaml");
pub const EXACTLY_ONCE_SECRET: &str = include_str!("../tests/fixtures/exactly_once_secret.yaml");
pub const ASSUME_ROLE: &str = include_str!("../tests/fixtures/assume_role.yaml");
pub const INVALID: &str = include_str!("../tests/fixtures/invalid.yaml");

pub const ALL: [&str; 4] = [BASIC, EXACTLY_ONCE_SECRET, ASSUME_ROLE, INVALID];

/// Parses a fixture; panics (test-only) when a fixture is malformed.
pub fn source(yaml: &str) -> SqsSource {
    match serde_yaml::from_str(yaml) {
        Ok(source) => source,
        Err(e) => panic!("fixture does not parse: {e}"),
    }
}
