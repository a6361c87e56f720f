#![forbid(unsafe_code)]
//! The Sluice reader: the data plane.

pub mod record;
pub mod sink;
