//! What a sink's circuit observes: each change of its state (`breaker::Transition`). One line
//! per change (WARN when it opens, INFO when it closes, DEBUG for probes in between) and the
//! `sink_circuit_state` gauge and `sink_circuit_transitions_total` counter, in one `emit`.
//!
//! Not rate-limited: a circuit changes state at most once per probe (1 s doubling to 30 s), and
//! each opening and closing is worth its own line.

use super::breaker::{State, Transition};
use crate::process::events::Event;
use crate::process::metrics::Metrics;

/// `sink`'s circuit changed as `change` says; `reason`: the last failure, when it opened.
pub struct CircuitChanged<'a> {
    pub sink: &'a str,
    pub change: &'a Transition,
    pub reason: Option<&'a str>,
}

impl Event for CircuitChanged<'_> {
    fn emit(self, metrics: &Metrics) {
        let Self { sink, change, reason } = self;
        metrics.sink_circuit(sink, change.to.gauge(), change.to.name());
        let (failures, probes_failed) = (change.failures, change.probes_failed);
        match (change.from, change.to) {
            (State::Closed, State::Open) => tracing::warn!(
                sink,
                failures,
                reason = reason.unwrap_or_default(),
                "sink circuit open: {failures} deliveries in a row failed; receiving paused, held messages stay invisible and one probes the sink (1 s, doubling to 30 s)"
            ),
            (_, State::Closed) => tracing::info!(
                sink,
                failures,
                probes_failed,
                "sink circuit closed: a delivery succeeded after {failures} failures; held messages are retried now and receiving resumes"
            ),
            (from, to) => {
                let (from, to) = (from.name(), to.name());
                tracing::debug!(sink, failures, probes_failed, from, to, "sink circuit");
            }
        }
    }
}
