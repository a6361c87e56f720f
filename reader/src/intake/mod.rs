//! From SQS into the pipeline: long-poll receives, the rate limit, decoding into records.

pub mod decode;
pub mod limiter;
pub mod poller;
mod receive;
pub mod trace;
