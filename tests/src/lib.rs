#![forbid(unsafe_code)]
//! Test harness.
