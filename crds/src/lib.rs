#![forbid(unsafe_code)]
//! The SqsSource API. The checkpoint and lease ConfigMaps that the operator and the readers
//! exchange belong to `sluice_protocol`, which whoever needs them depends on directly.

pub mod key_template;
pub mod queue;
pub mod redrive;
pub mod sink_kind;
pub mod spec;
pub mod status;
pub mod validate;

pub use redrive::RedrivePolicy;
pub use sink_kind::{SinkBlock, SinkKind};
pub use spec::*;
pub use status::*;
