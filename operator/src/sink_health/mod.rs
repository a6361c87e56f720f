//! The `SinksHealthy` condition: whether the readers' sinks take deliveries, from the health each
//! reader reports in its lease ConfigMap, with an event on each transition; and, from the same
//! reports, what each reader holds (`status.readers`, `status.held`).
//!
//! Why a task of its own and not a branch of `reconcile`: a sink that starts failing changes no
//! object the reconciler watches, so the condition must follow the reports on a clock of its own;
//! and it is written under its own field manager, so no other writer resets it.

pub mod held;
mod task;
pub mod verdict;

pub use task::{API_CALLS, TICK, run};

/// The condition type.
pub const SINKS_HEALTHY: &str = "SinksHealthy";
/// Field manager of the condition.
pub const FIELD_MANAGER: &str = "sluice-sink-health";
