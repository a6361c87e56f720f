//! A ReceiveMessage call that failed: counted by its AWS code (`reader_errors_total{stage=
//! "receive"}`), one WARN line per queue and kind per `warnings::WINDOW`, with the count, and the
//! queue's receive health (`process::health`: not ready once receives fail for
//! `--unready-after-seconds` without an answer).

use std::fmt;
use std::time::Duration;

use super::{About, Event, Fault, warn};
use crate::process::metrics::{Metrics, queue_name};

/// Why a receive failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiveError {
    /// SQS answered with this error code; `reason` is its one-line text.
    Failed { code: String, reason: String },
    /// No answer within `limit`.
    Timeout { limit: Duration },
}

impl fmt::Display for ReceiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReceiveError::Failed { code, reason } => write!(f, "{code}: {reason}"),
            ReceiveError::Timeout { limit } => write!(f, "no answer within {} s", limit.as_secs()),
        }
    }
}

/// A poller's receive from `queue_url` failed; it tries again after `retry_in`.
pub struct ReceiveFailed<'a> {
    pub queue_url: &'a str,
    pub error: &'a ReceiveError,
    pub retry_in: Duration,
}

impl Event for ReceiveFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        let (fault, kind) = match self.error {
            ReceiveError::Failed { code, .. } => (Fault::ReceiveFailed(code.clone()), "receive_failed"),
            ReceiveError::Timeout { .. } => (Fault::ReceiveTimeout, "receive_timeout"),
        };
        metrics.fault(fault);
        let queue = queue_name(self.queue_url);
        metrics.health.receive_failed(queue, &self.error.to_string());
        warn(metrics, About::Queue(queue), kind, |failures, window| {
            let (error, retry_ms) = (self.error, self.retry_in.as_millis());
            format!(
                "receive from queue {queue} failed ({failures} in up to {window} s): {error}; backing off {retry_ms} ms"
            )
        });
    }
}
