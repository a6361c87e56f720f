#![forbid(unsafe_code)]
//! The operator.
