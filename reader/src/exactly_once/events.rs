//! What the exactly-once gate observes going wrong: redelivered messages it cannot classify
//! against the leases (the coordination API failed). Counted under `classify`, with one WARN line
//! per `warnings::WINDOW` (`process::events::warn`); the messages are left invisible for later.

use crate::process::events::{About, Event, Fault, warn};
use crate::process::metrics::Metrics;

/// `messages` redelivered messages could not be classified, for `error`.
pub struct ClassifyFailed<'a> {
    pub error: &'a str,
    pub messages: usize,
}

impl Event for ClassifyFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(Fault::ClassifyFailed);
        let (error, messages) = (self.error, self.messages);
        warn(metrics, About::Reader("classify"), "classify_failed", |failures, window| {
            format!(
                "cannot classify {messages} redelivered messages ({failures} times in up to {window} s); leaving them for later: {error}"
            )
        });
    }
}
