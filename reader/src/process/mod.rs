//! What every stage shares as a process: the error type and exit codes, the stop signal, metrics,
//! the admin server, the clock, the retry backoff and rate-limited WARN lines.

pub mod admin;
pub mod backoff;
pub mod batch_metrics;
pub mod batch_stats;
pub mod error;
pub mod events;
pub mod fetch_stats;
pub mod filter_metrics;
pub mod health;
pub mod metrics;
pub mod report;
pub mod runtime;
pub mod settled;
pub mod signals;
pub mod sink_stats;
pub mod stop;
pub mod wait_quantiles;
pub mod warnings;
