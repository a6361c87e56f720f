#![forbid(unsafe_code)]
//! Test harness.
pub mod localstack;
pub mod controlplane;
pub mod kubelet;
pub mod sinkserver;
