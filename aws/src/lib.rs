//! The AWS vocabulary the reader and the operator share, so that they agree on it without
//! depending on each other: what a failed call means ([`fault`]) and how every request sent is
//! counted ([`requests`]). Each binary keeps its own metric family and labels; this crate names
//! no metric.

#![forbid(unsafe_code)]

pub mod fault;
pub mod requests;

pub use fault::{AwsFault, FaultClass, Via, describe, describe_call, error_type};
