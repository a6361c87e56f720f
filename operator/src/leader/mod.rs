//! Leader election: only the replica holding the `coordination.k8s.io` Lease reconciles, scales
//! and coordinates checkpoints, so two operator replicas can run for availability without two
//! writers. The decision is pure (`lease`); the reads and compare-and-swap writes are in
//! `elector`.

pub mod elector;
pub mod lease;

pub use elector::{Elector, LeaseTimings};
