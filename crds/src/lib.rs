#![forbid(unsafe_code)]
//! The SqsSource API and the checkpoint protocol's shared data types.

pub mod checkpoint;
pub mod spec;
pub mod status;

pub use spec::*;
pub use status::*;
