#![forbid(unsafe_code)]
//! Test harness.
pub mod localstack;
pub mod sinkserver;
