//! The reader in a Kubernetes cluster: its lease ConfigMap as the checkpoint protocol's backend
//! and its sink health report, and its share of the source-wide rate limit. The only module that names kube; compiled with
//! the cargo feature `cluster` (on by default).

mod api_line;
pub mod health_report;
pub mod lease;
pub mod share;

mod client;

pub use client::{join, report_sink_health, start_share};
