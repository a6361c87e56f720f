#![forbid(unsafe_code)]
//! The Sluice reader: the data plane. Polls SQS, delivers to sinks, deletes only what is safe.
//!
//! Grouped by stage (reader/ARCHITECTURE.md has the picture and the dependency rule): `config`,
//! then `intake` → `deliver` → `sink` → `settle`. Exactly-once is one seam, `settle::Gate`, that
//! the stages call and that `exactly_once` implements; only `cluster` (cargo feature `cluster`,
//! on by default) knows Kubernetes. `run` wires them from an `SqsSource` and drains on a stop.

pub mod aws;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod config;
pub mod deliver;
pub mod exactly_once;
pub mod intake;
pub mod payload;
pub mod process;
pub mod record;
pub mod run;
pub mod settle;
pub mod sink;
