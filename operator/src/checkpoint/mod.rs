//! The checkpoint coordinator task (`protocol/PROTOCOL.md`).
//!
//! Why a task of its own and not a branch of `reconcile`: commits must keep coming at the pace of
//! the checkpoint interval whether or not any SqsSource changed, and a slow reconcile must not
//! delay a commit. The decisions are `sluice_protocol::coordinator::step`, the same pure
//! function standalone readers and the model check run; `plan` adds what the status says about
//! them, `body` the apply bodies, `metrics` the Prometheus series, `task` the I/O.

mod body;
pub mod metrics;
mod plan;
mod task;

pub use metrics::Metrics;
pub use plan::{CheckpointStatus, Plan, SKEW_MS, barrier_durations, plan, read_checkpoint};
pub use task::{TICK, run};

/// Field manager of every checkpoint write (ConfigMap data keys, status fields).
pub const FIELD_MANAGER: &str = "sluice-checkpoint";
