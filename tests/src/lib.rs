#![forbid(unsafe_code)]
//! What the suites and benchmarks share: LocalStack queues and buckets ([`localstack`]), a CloudEvents
//! sink ([`sinkserver`]), SqsSource manifests ([`source`]) and an endpoint that is down, then back
//! ([`outage`]). The real control plane, the process kubelet and the system as processes live in the
//! `sluice-cluster` crate; they are re-exported here so that a suite names everything through
//! `sluice_tests`.
pub mod kubectl;
pub mod latency_proxy;
pub mod localstack;
pub mod outage;
pub mod proc_usage;
pub mod reaction;
pub mod request_counts;
pub mod s3_objects;
pub mod scrape;
pub mod side_by_side;
pub mod sinkserver;
pub mod source;
pub mod standalone;

pub use sluice_cluster::{cluster, controlplane, install, kubeconfig, kubelet, pki, poll, system};
