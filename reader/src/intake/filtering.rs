//! `spec.filter` in the poller: judge each decoded message, and carry out the fate of a
//! mismatch through the pipeline's usual paths.
//!
//! Where: after the ledger admitted the batch and it was decoded, before any payload is fetched
//! from S3 (a message turned away costs no GetObject) and before the rate limit (which counts
//! what is delivered). The fates:
//! - `delete`: settled as delivered to no sink (`Verdict::Delete`): the acker's batched delete
//!   under atLeastOnce; under exactlyOnce the ledger holds it for its epoch like any delivered
//!   message, the gate is told it is settled, and it is deleted when the epoch commits, so a
//!   filtered message follows the same checkpoint rule as a delivered one.
//! - `release`: back to the queue through the acker's visibility change, after
//!   `releaseDelaySeconds` or the redelivery delay for its receive count, whichever is longer
//!   (`settle::Pipeline::release_unwanted`): never a hot loop.
//! - `route`: delivered on with the rest of the batch, marked for the named sink only
//!   (`deliver::dispatch::Item::to`), with that sink's retries, hold and circuit.
//!
//! An evaluation error (a missing key, a wrong type) is, by default (`onError: deadLetter`), the
//! message's fault: it goes on as poison, with a reason naming the expression and the error, so
//! the dispatcher gives it to the dead-letter sink, or, with none, releases it with the visibility
//! delay that grows with its receive count, as a rejected record. Taking it as a mismatch would
//! let a typo or a field some producer leaves out delete every message it fails on (`onMismatch:
//! delete`); that stays available, named (`onError: mismatch`). Either way it is counted apart
//! and logged as one rate-limited WARN line.

use std::time::{Duration, Instant};

use sluice_crds::{FilterErrorFate, FilterFate, FilterSpec};

use super::context::Intake;
use super::filter::{Filter, Judgement};
use crate::deliver::dispatch::{Item, Verdict};
use crate::process::error::{Error, Result};
use crate::process::events::{About, warn};
use crate::process::filter_metrics::FilterCounts;
use crate::process::metrics::{Metrics, queue_name};
use crate::record::Record;
use crate::settle::ledger::Ticket;

/// One decoded message in the poller: its ticket, record, and why it is poison if it is.
pub type DecodedMessage = (Ticket, Record, Option<String>);

/// The compiled filter and the fate of what it turns away.
pub struct FilterStage {
    filter: Filter,
    fate: FilterFate,
    /// `releaseDelaySeconds`: the least delay of a release.
    release_floor: Duration,
    /// `routeTo`, as an index into `spec.sinks`.
    route_to: Option<usize>,
    /// `onError`: the fate of a message the expression fails on.
    on_error: FilterErrorFate,
    /// The expression as a dead-letter reason quotes it (cut to [`QUOTED_EXPRESSION`] characters).
    quoted: String,
}

/// How much of the expression a dead-letter reason quotes: the reason travels as a message
/// attribute or a header, next to the error.
const QUOTED_EXPRESSION: usize = 200;

impl FilterStage {
    /// Build `spec.filter` for sinks named `sink_names` (spec order); a bad expression or an
    /// unknown `routeTo` is a configuration error naming the field.
    pub fn new(spec: &FilterSpec, sink_names: &[&str]) -> Result<Self> {
        let filter = Filter::compile(spec).map_err(|m| Error::config("spec.filter.expression", m))?;
        let route_to = match (&spec.on_mismatch, &spec.route_to) {
            (FilterFate::Route, Some(name)) => {
                Some(sink_names.iter().position(|s| s == name).ok_or_else(|| {
                    Error::config("spec.filter.routeTo", format!("names no sink in spec.sinks ({name:?})"))
                })?)
            }
            (FilterFate::Route, None) => {
                return Err(Error::config("spec.filter.routeTo", "is required with onMismatch: route"));
            }
            _ => None,
        };
        let release_floor = Duration::from_secs(spec.release_delay_seconds.unwrap_or(0).into());
        let quoted = match spec.expression.char_indices().nth(QUOTED_EXPRESSION) {
            Some((end, _)) => format!("{}…", &spec.expression[..end]),
            None => spec.expression.clone(),
        };
        Ok(Self { filter, fate: spec.on_mismatch, release_floor, route_to, on_error: spec.on_error, quoted })
    }

    /// The sink that takes only the mismatches (`routeTo`), if any.
    pub fn route_to(&self) -> Option<usize> {
        self.route_to
    }

    /// The dead-letter reason of a message the expression failed on with `error`.
    fn error_reason(&self, error: &str) -> String {
        format!("spec.filter.expression {:?} failed on the message: {error}", self.quoted)
    }

    /// Judge `decoded`: matches go on; mismatches are deleted or released here, or go on marked
    /// for the route sink (answered as `(ticket, sink)`); a message the expression fails on goes on
    /// as poison (`onError: deadLetter`) or meets the mismatches' fate.
    pub fn apply(
        &self,
        intake: &Intake,
        decoded: Vec<DecodedMessage>,
    ) -> (Vec<DecodedMessage>, Vec<(Ticket, usize)>) {
        let mut counts = FilterCounts::default();
        let mut kept = Vec::with_capacity(decoded.len());
        let mut routed = Vec::new();
        for (ticket, record, poison) in decoded {
            let started = Instant::now();
            let judgement = self.filter.judge(&record);
            counts.evaluated.push(started.elapsed());
            match judgement {
                Judgement::Match => {
                    counts.matched += 1;
                    kept.push((ticket, record, poison));
                    continue;
                }
                Judgement::Mismatch => {}
                Judgement::Error(reason) => {
                    counts.errors += 1;
                    warn_error(&intake.metrics, &intake.queue.url, &reason, self.on_error);
                    if self.on_error == FilterErrorFate::DeadLetter {
                        counts.failed += 1;
                        // Already poison (not JSON under `payload: json`): that reason stands.
                        let poison = poison.or_else(|| Some(self.error_reason(&reason)));
                        kept.push((ticket, record, poison));
                        continue;
                    }
                }
            }
            match (self.fate, self.route_to) {
                (FilterFate::Route, Some(sink)) => {
                    counts.routed += 1;
                    routed.push((ticket, sink));
                    kept.push((ticket, record, poison));
                }
                (FilterFate::Release, _) => {
                    counts.released += 1;
                    let item = Item::new(record, poison);
                    intake.pipeline.release_unwanted(ticket, &item, self.release_floor);
                }
                _ => {
                    counts.deleted += 1;
                    let item = Item::new(record, poison);
                    intake.pipeline.settle(&[ticket], &[Verdict::Delete], &[item]);
                }
            }
        }
        intake.metrics.filter.count(&intake.queue.url, &counts);
        (kept, routed)
    }
}

/// Mark the items of routed tickets for their sink (`tickets` and `items` side by side).
pub fn mark_routes(tickets: &[Ticket], items: &mut [Item], routed: &[(Ticket, usize)]) {
    if routed.is_empty() {
        return;
    }
    for (ticket, item) in tickets.iter().zip(items.iter_mut()) {
        if let Some((_, sink)) = routed.iter().find(|(t, _)| t == ticket) {
            item.to = Some(*sink);
        }
    }
}

/// One WARN line per queue per `warnings::WINDOW`, with the count, what became of them and the
/// latest reason.
fn warn_error(metrics: &Metrics, queue_url: &str, reason: &str, fate: FilterErrorFate) {
    let queue = queue_name(queue_url);
    let fate = match fate {
        FilterErrorFate::DeadLetter => {
            "each sent to the dead-letter route (spec.filter.onError: deadLetter; with no deadLetterSink, released with a growing delay)"
        }
        FilterErrorFate::Mismatch => "each taken as a mismatch (spec.filter.onError: mismatch)",
    };
    warn(metrics, About::Queue(queue), "filter_error", |errors, window| {
        format!(
            "spec.filter.expression failed on {errors} messages of queue {queue} in up to {window} s, {fate}: {reason}; guard optional fields with has()"
        )
    });
}
