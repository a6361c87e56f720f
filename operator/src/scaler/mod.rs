//! The autoscaler: sizes each SqsSource's reader Deployment from its queues' depth and its readers'
//! measured drain rate.
//!
//! It runs beside the reconciler rather than inside it because it is driven by the queue, not by
//! Kubernetes objects changing: one loop per source polls the queue attributes, decides (pure, in
//! `decision`), and writes only `spec.replicas` under its own field manager, so reconcile and
//! autoscaler never fight over the same field.

pub mod decision;
pub mod history;
pub mod reason;

pub use decision::{Decision, Observation, backlog, decide};
pub use history::History;
pub use reason::{Basis, Reason};
