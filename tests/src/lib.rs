#![forbid(unsafe_code)]
//! Test harness.
pub mod localstack;
