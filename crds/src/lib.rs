#![forbid(unsafe_code)]
//! The SqsSource API.
//!
//! `checkpoint` is the protocol crate under the name the API's users know: the checkpoint and
//! lease ConfigMaps that the operator and the readers exchange are part of the API.

pub use sluice_protocol as checkpoint;
pub mod queue;
pub mod redrive;
pub mod sink_kind;
pub mod spec;
pub mod status;
pub mod validate;

pub use redrive::RedrivePolicy;
pub use sink_kind::SinkKind;
pub use spec::*;
pub use status::*;
