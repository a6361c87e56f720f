#![forbid(unsafe_code)]
//! The Sluice reader: the data plane. Polls SQS, delivers to sinks, deletes only what is safe.
//!
//! The core pipeline (pollers, limiter, decoding, dispatch, ledger, acker, heartbeat) knows
//! nothing of Kubernetes; `reader::run` wires it from an `SqsSource` and drains it on a stop.

pub mod acker;
pub mod admin;
pub mod aws;
pub mod cli;
pub mod coordination;
pub mod decode;
pub mod dispatch;
pub mod epochs;
pub mod error;
pub mod fifo;
pub mod heartbeat;
pub mod ledger;
pub mod limiter;
pub mod metrics;
pub mod pipeline;
pub mod poller;
pub mod queue_url;
pub mod queues;
pub mod reader;
pub mod record;
pub mod redelivery;
pub mod settings;
pub mod signals;
pub mod sink;
pub mod source_file;
pub mod stop;
