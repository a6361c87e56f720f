//! One typed value per thing worth observing, each with an `emit` that counts it, writes its
//! rate-limited WARN line and updates the health it affects, in one call.
//!
//! Why: a call site that counts, logs and updates health by itself forgets one of the three, or
//! words the line its own way; an event spells the metric's labels, the line and the health change
//! once, and a new one is a new type. The events of the bottom layer are here (receiving, the
//! targets a source names, what `Fault` only counts); the stages keep theirs beside what they
//! observe (`deliver::events`, `settle::events`, `payload::events`, `sink::events`,
//! `exactly_once::events`), because the layering rule keeps a stage's names out of this layer.
//!
//! An event that repeats writes its WARN line through [`warn`]: the rate limit, the window and
//! the line's fields are spelled there once, so an event states only its key, its kind and its
//! words.

mod fault;
pub mod receive;
pub mod targets;

pub use fault::Fault;

use super::metrics::Metrics;
use super::warnings::WINDOW;

/// Something observable: [`Event::emit`] counts it, logs it (rate-limited where it repeats) and
/// updates the reader's health (`Metrics::health`) as it affects it.
pub trait Event {
    fn emit(self, metrics: &Metrics);
}

/// Every event that only counts (its line, if any, is written where more is known).
impl Event for Fault {
    fn emit(self, metrics: &Metrics) {
        metrics.fault(self);
    }
}

/// What a repeating WARN line is about: a sink or a queue (named in the line's `sink` or `queue`
/// field), or a part of the reader (`object fetch`, `epoch`: only the rate limit's key).
#[derive(Clone, Copy, Debug)]
pub enum About<'a> {
    Sink(&'a str),
    Queue(&'a str),
    Reader(&'a str),
}

/// The WARN line of an event that repeats: the first at once, then at most one per `about` and
/// `kind` per [`WINDOW`]. `line(count, window_seconds)` words it only when one is due; `count` is
/// how many occurrences it stands for (this one included), the line's `failures` field.
pub fn warn(metrics: &Metrics, about: About<'_>, kind: &'static str, line: impl FnOnce(u64, u64) -> String) {
    let (About::Sink(key) | About::Queue(key) | About::Reader(key)) = about;
    let Some(failures) = metrics.health.warnings().due(key, kind) else {
        return;
    };
    let line = line(failures, WINDOW.as_secs());
    match about {
        About::Sink(sink) => tracing::warn!(sink, kind, failures, "{line}"),
        About::Queue(queue) => tracing::warn!(queue, kind, failures, "{line}"),
        About::Reader(_) => tracing::warn!(kind, failures, "{line}"),
    }
}
