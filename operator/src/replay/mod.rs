//! Replay: a declarative request (`spec.replay`) that sends a source's dead letters back through
//! it, at a bounded rate, once per request, resumable after an operator restart.
//!
//! `plan` (pure) decides per message and reads where a restart left off; `mover` talks to SQS;
//! `job` runs one request; `report` writes `status.replay`, Events and metrics; `task` starts and
//! stops the jobs. docs/replay.md says how it works and why the operator moves the messages itself.

pub mod job;
pub mod mover;
pub mod plan;
pub mod report;
pub mod task;

pub use task::{API_CALLS, TICK, run};
