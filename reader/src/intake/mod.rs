//! From SQS into the pipeline: long-poll receives, the bound on what a reader holds, the rate
//! limit, decoding into records.

pub mod bound;
pub mod context;
pub mod decode;
pub mod filter;
pub mod filtering;
pub mod limiter;
pub mod pacing;
pub mod poller;
pub mod poller_count;
mod receive;
pub mod trace;
pub mod window;
