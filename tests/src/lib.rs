#![forbid(unsafe_code)]
//! Test harness.
pub mod controlplane;
pub mod kubelet;
pub mod latency_proxy;
pub mod localstack;
pub mod sinkserver;
pub mod system;
