#![forbid(unsafe_code)]
//! The operator: turns `SqsSource`s into reader Deployments, reports their state, scales them,
//! and coordinates checkpoint epochs.
//!
//! Reconcile is a pipeline of small modules, each with one job: `validate` (pure) → `build`
//! (pure) → `apply` (server-side apply) → `queue_check` (AWS, behind a trait) → `conditions`
//! (pure) → `status` and `events` (writes). `controller` wires the pipeline into kube-runtime;
//! `leader`, `metrics`, `admin` and `telemetry` are the process around it.

pub mod access;
pub mod admin;
pub mod app;
pub mod apply;
pub mod aws_requests;
pub mod backoff;
pub mod build;
pub mod cache_watch;
pub mod cli;
pub mod condition_patch;
pub mod conditions;
pub mod controller;
pub mod deletion;
pub mod deployment_views;
pub mod error;
pub mod events;
pub mod identity;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod own_writes;
pub mod pod_checks;
pub mod queue_check;
pub mod reader_register;
pub mod reconcile;
pub mod reconcile_wait;
pub mod scope;
pub mod source_cache;
pub mod source_ticks;
pub mod status;
pub mod telemetry;
pub mod throttle;
pub mod validate;
pub mod validate_caveats;

pub mod checkpoint;
pub mod replay;
pub mod scaler;
pub mod sink_health;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod pipeline_proptest;
#[cfg(test)]
mod scripted_api;
