#![forbid(unsafe_code)]
//! The SqsSource API and the checkpoint protocol's shared data types.

pub mod checkpoint;
pub mod queue;
pub mod sink_kind;
pub mod spec;
pub mod status;
pub mod validate;

pub use sink_kind::SinkKind;
pub use spec::*;
pub use status::*;
