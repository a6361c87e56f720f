//! Dispatch: a received batch through routing, the sinks and the dead-letter route, to one
//! verdict per message for the ledger.
//!
//! Why verdicts and not outcomes: a message may go to several sinks (routes fan out), and a
//! rejected one may still be settled by the dead-letter sink, so what the ledger needs is the
//! combined answer: delete it, hold it (a sink's fault: keep it and try again), release it (its
//! own fault and nowhere to put it), or stop the reader (failOnError). Standard queues are
//! delivered as one batch per sink (the sink runs its own concurrency); FIFO queues one message
//! at a time per group, groups side by side (see `fifo`).

use std::sync::Arc;
use std::time::Instant;

use futures::future::{BoxFuture, FutureExt, join_all};
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use sluice_protocol::now_ms;
use tracing::{Instrument, Span};

use crate::deliver::events::{
    DeadLetterFailed, DeadLettered, Delivered, DeliveryFailed, FailureKind, NoDeadLetterSink, ObjectRefused,
    RefusalUnsettled,
};
use crate::deliver::fair::GroupTurns;
use crate::deliver::{fifo, message_span};
use crate::process::events::Event;
use crate::process::metrics::{Metrics, queue_name};
use crate::record::Record;
use crate::sink::dead_letter::leaves_context_out;
use crate::sink::{Outcome, Sinks};

/// What the ledger does with one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered (or dead-lettered): delete it (or hold it for its epoch).
    Delete,
    /// Not delivered for a sink's fault (`sink::fault::Fault::Sink`): keep it invisible in the
    /// reader and deliver it again when the sink's circuit lets it (`settle::pipeline`). It never
    /// costs the message a receive. `acknowledged`: the sinks (indexes into `spec.sinks`) that
    /// took it in this delivery; the next one skips them ([`Item::acknowledged`]), so a sink that
    /// works does not get the message again for every round of another sink's outage.
    Hold { acknowledged: Vec<usize> },
    /// Not delivered for its own fault with no dead-letter sink to take it (or a drop): make it
    /// visible again, with a delay that grows with its receive count. Once the reader is
    /// stopping (a delivery not started, `Outcome::NotStarted`), at once.
    Release,
    /// Rejected under failOnError: release it and stop the reader.
    Stop { reason: String },
}

/// A decoded message; `poison` when it cannot be delivered at all (bad JSON).
#[derive(Clone)]
pub struct Item {
    pub record: Arc<Record>,
    pub poison: Option<String>,
    /// The one sink (index into `spec.sinks`) that takes it whatever the routes: a message
    /// `spec.filter` did not match, with `onMismatch: route`. `None`: the routes decide.
    pub to: Option<usize>,
    /// The sinks (indexes into `spec.sinks`) that took a held message in an earlier delivery
    /// ([`Verdict::Hold`]): it goes again only to the others.
    pub acknowledged: Vec<usize>,
}

impl Item {
    pub fn new(record: Record, poison: Option<String>) -> Self {
        Self { record: Arc::new(record), poison, to: None, acknowledged: Vec::new() }
    }
}

/// The sinks' answers for one record, combined. A rejection wins (retrying cannot help, so the
/// record is poison whatever the other sinks said); then a redelivery (only a new receive can
/// help); then a delivery not started (the reader stops: hand it back); then a failure (hold, try
/// again later); delivered only when every sink that takes the
/// record delivered it. A record no sink takes is delivered to nothing and counts as delivered.
pub fn combine<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Outcome {
    let rank = |o: &Outcome| match o {
        Outcome::Delivered => 0,
        Outcome::Failed { .. } => 1,
        Outcome::NotStarted => 2,
        Outcome::Redeliver { .. } => 3,
        Outcome::Rejected { .. } => 4,
    };
    let mut combined = Outcome::Delivered;
    for outcome in outcomes {
        if rank(outcome) > rank(&combined) {
            combined = outcome.clone();
        }
    }
    combined
}

pub struct Dispatcher {
    sinks: Sinks,
    fail_on_error: bool,
    metrics: Arc<Metrics>,
    /// `spec.filter.routeTo`: the sink that takes only the messages the filter turned away.
    diverted: Option<usize>,
    /// Turns by message group for per-record deliveries of standard queues
    /// (`spec.delivery.fairness: byGroup`); `None`: in the order received.
    fair: Option<Arc<GroupTurns>>,
}

impl Dispatcher {
    pub fn new(sinks: Sinks, fail_on_error: bool, metrics: Arc<Metrics>) -> Self {
        for routed in &sinks.sinks {
            if let Some(stats) = routed.sink.stats() {
                metrics.watch_sink(routed.sink.name(), stats);
            }
        }
        if let Some(stats) = sinks.dead_letter.as_ref().and_then(|d| d.sink().stats()) {
            metrics.watch_sink(sinks.dead_letter.as_ref().map_or("", |d| d.sink().name()), stats);
        }
        Self { sinks, fail_on_error, metrics, diverted: None, fair: None }
    }

    /// Share `slots` deliveries at a time round-robin among message groups (see `fair`).
    pub fn fair_by_group(self, slots: Option<usize>) -> Self {
        let metrics = self.metrics.clone();
        Self { fair: slots.map(|slots| GroupTurns::new(slots, Some(metrics))), ..self }
    }

    /// Keep sink `sink` for the messages `spec.filter` turns away with `onMismatch: route`
    /// (marked with [`Item::to`]): a matching message skips it whatever its route.
    pub fn divert_to(self, sink: Option<usize>) -> Self {
        Self { diverted: sink, ..self }
    }

    /// Indexes of the sinks that take `item` and have not taken it yet.
    fn targets(&self, item: &Item) -> Vec<usize> {
        let mut targets = match item.to {
            Some(sink) => vec![sink],
            None => {
                let mut targets = self.sinks.targets(&item.record);
                targets.retain(|&s| Some(s) != self.diverted);
                targets
            }
        };
        targets.retain(|s| !item.acknowledged.contains(s));
        targets
    }

    pub fn sinks(&self) -> &Sinks {
        &self.sinks
    }

    /// The names of the sinks `items` go to (their circuits decide when a held delivery goes).
    pub fn target_names<'a>(&self, items: impl IntoIterator<Item = &'a Item>) -> Vec<String> {
        let mut targets: Vec<usize> = items.into_iter().flat_map(|i| self.targets(i)).collect();
        targets.sort_unstable();
        targets.dedup();
        targets.into_iter().map(|s| self.sinks.sinks[s].sink.name().to_owned()).collect()
    }

    /// One verdict per item, in the same order, once every item is settled.
    pub async fn dispatch(&self, items: &[Item], fifo: bool) -> Vec<Verdict> {
        let mut verdicts = vec![Verdict::Release; items.len()];
        let mut settled = self.settle_as_done(items, fifo);
        while let Some(part) = settled.next().await {
            for (i, verdict) in part {
                verdicts[i] = verdict;
            }
        }
        verdicts
    }

    /// Verdicts as deliveries end, `(index into items, verdict)`: a record every one of whose
    /// sinks sends records one by one (http, log) is answered on its own, as soon as it is
    /// done; the rest of a standard batch goes to batching sinks together and is answered
    /// together; a FIFO batch is answered as a whole (order within a group decides it).
    pub fn settle_as_done<'a>(
        &'a self,
        items: &'a [Item],
        fifo: bool,
    ) -> BoxStream<'a, Vec<(usize, Verdict)>> {
        let spans = self.delivery_spans(items);
        if fifo {
            let whole =
                async move { self.dispatch_fifo(items, &spans).await.into_iter().enumerate().collect() };
            return futures::stream::once(whole).boxed();
        }
        let (alone, together): (Vec<usize>, Vec<usize>) =
            (0..items.len()).partition(|&i| self.alone(&items[i]));
        let parts: FuturesUnordered<BoxFuture<'a, Vec<(usize, Verdict)>>> = alone
            .into_iter()
            .map(|i| {
                let spans = spans.clone();
                async move {
                    // Only messages that name a group take turns: without group ids nothing
                    // changes, and a routed source keeps each sink's own concurrency.
                    let _turn = match (&self.fair, items[i].record.group_id.as_deref()) {
                        (Some(fair), Some(group)) => Some(fair.turn(group).await),
                        _ => None,
                    };
                    let verdict = self.deliver(std::slice::from_ref(&items[i]), &spans).await.pop();
                    vec![(i, verdict.unwrap_or(Verdict::Release))]
                }
                .boxed()
            })
            .collect();
        if !together.is_empty() {
            parts.push(
                async move {
                    let batch: Vec<Item> = together.iter().map(|&i| items[i].clone()).collect();
                    together.into_iter().zip(self.deliver(&batch, &spans).await).collect()
                }
                .boxed(),
            );
        }
        parts.boxed()
    }

    /// One span per sink for one received batch (all from one queue): its lines (failures, dead
    /// letters) name the sink and the queue. Made once per batch rather than per sink call, since
    /// a per-record sink (http, log) is called once per message.
    fn delivery_spans(&self, items: &[Item]) -> Arc<[Span]> {
        let queue = items.first().map_or("", |i| queue_name(&i.record.queue_url));
        self.sinks.sinks.iter().map(|r| tracing::info_span!("deliver", sink = r.sink.name(), queue)).collect()
    }

    /// Whether `item` can be settled on its own: poison (only the dead-letter sink sees it), or
    /// every sink that takes it sends one request per record.
    fn alone(&self, item: &Item) -> bool {
        item.poison.is_some() || self.targets(item).into_iter().all(|s| self.sinks.sinks[s].sink.per_record())
    }

    async fn dispatch_fifo(&self, items: &[Item], spans: &[Span]) -> Vec<Verdict> {
        let runs = fifo::group_runs(items.iter().map(|i| i.record.group_id.as_deref()));
        let mut verdicts = vec![Verdict::Release; items.len()];
        let results = join_all(runs.iter().map(|run| {
            fifo::in_order(
                run,
                |i| async move {
                    let verdict = self.deliver(std::slice::from_ref(&items[i]), spans).await.pop();
                    verdict.unwrap_or(Verdict::Release)
                },
                |verdict| *verdict == Verdict::Delete,
            )
        }))
        .await;
        // Indexes held back behind an unfinished message share its fate: held with it when a sink
        // is at fault (retried together, in order), else released with it (they come back in
        // order after it).
        for (answers, held_back) in results {
            let blocked = answers.last().is_some_and(|(_, v)| matches!(v, Verdict::Hold { .. }));
            for (i, verdict) in answers {
                verdicts[i] = verdict;
            }
            if blocked {
                for i in held_back {
                    verdicts[i] = Verdict::Hold { acknowledged: Vec::new() };
                }
            }
        }
        verdicts
    }

    /// Deliver to every sink that takes each record, then settle the rejected ones.
    /// `spans`: the batch's span for each sink, by index (see [`Dispatcher::delivery_spans`]).
    async fn deliver(&self, items: &[Item], spans: &[Span]) -> Vec<Verdict> {
        let (mut outcomes, per_sink) = self.route(items);
        // The sinks that refused each record, with their reasons: they count against a sink's
        // health only if the record cannot be settled (see `verdicts`).
        let mut refusals: Vec<Vec<(&str, String)>> = vec![Vec::new(); items.len()];
        // The sinks that took each record: a held record does not go to them again.
        let mut acknowledged: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
        let calls = per_sink.iter().enumerate().filter(|(_, idx)| !idx.is_empty()).map(|(s, idx)| {
            let sink = &self.sinks.sinks[s].sink;
            let span = spans.get(s).cloned().unwrap_or_else(Span::none);
            let call = async move {
                let records: Vec<Arc<Record>> = idx.iter().map(|&i| items[i].record.clone()).collect();
                let traced = message_span::open(&records, sink.name());
                let started = Instant::now();
                let answer = sink.deliver(&records).await;
                self.metrics.sink_latency(sink.name(), started.elapsed());
                (answer, traced)
            };
            call.instrument(span.clone()).map(move |(answer, traced)| (s, idx, answer, traced, span))
        });
        for (s, idx, answer, traced, span) in join_all(calls).await {
            let _in_delivery = span.enter();
            let (name, circuits) = (self.sinks.sinks[s].sink.name(), &*self.sinks.circuits);
            let acked_ms = now_ms();
            let mut delivered = 0;
            for (k, &i) in idx.iter().enumerate() {
                let outcome = answer.get(k).cloned().unwrap_or_else(|| Outcome::Failed {
                    reason: format!(
                        "sink {name} answered {} outcomes for {} records",
                        answer.len(),
                        idx.len()
                    ),
                });
                message_span::close(&traced, k, &outcome);
                match &outcome {
                    Outcome::Delivered => {
                        delivered += 1;
                        acknowledged[i].push(s);
                        let record = &items[i].record;
                        Delivered { sink: name, circuits, record, acked_ms }.emit(&self.metrics);
                    }
                    Outcome::Rejected { reason } => {
                        refusals[i].push((name, reason.clone()));
                        let kind = FailureKind::Rejected;
                        DeliveryFailed { sink: name, circuits, kind, reason }.emit(&self.metrics);
                    }
                    Outcome::Redeliver { reason } => {
                        tracing::debug!(message_id = %items[i].record.message_id, %reason, "to be received again");
                    }
                    // The reader stops: the sink was not asked, so neither its counts, its health
                    // nor its circuit change.
                    Outcome::NotStarted => {
                        tracing::debug!(message_id = %items[i].record.message_id, sink = name, "not started: the reader is stopping");
                    }
                    Outcome::Failed { reason } => {
                        let kind = FailureKind::Failed;
                        DeliveryFailed { sink: name, circuits, kind, reason }.emit(&self.metrics);
                    }
                }
                outcomes[i].push(outcome);
            }
            self.metrics.delivered(name, delivered);
            tracing::debug!(records = idx.len(), delivered, "delivered");
        }
        let mut verdicts = self.verdicts(items, &outcomes, &refusals).await;
        for (verdict, took) in verdicts.iter_mut().zip(acknowledged) {
            if let Verdict::Hold { acknowledged } = verdict {
                *acknowledged = took;
            }
        }
        verdicts
    }

    /// Each record's outcomes so far (poison, refusals of sinks that cannot take it) and, per
    /// sink, the indexes of the records it is to be given.
    fn route(&self, items: &[Item]) -> (Vec<Vec<Outcome>>, Vec<Vec<usize>>) {
        let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); items.len()];
        let mut per_sink: Vec<Vec<usize>> = vec![Vec::new(); self.sinks.sinks.len()];
        for (i, item) in items.iter().enumerate() {
            match &item.poison {
                Some(reason) => outcomes[i].push(Outcome::Rejected { reason: reason.clone() }),
                None => {
                    for s in self.targets(item) {
                        let sink = &self.sinks.sinks[s].sink;
                        match &item.record.object {
                            Some(object) if !sink.streams_objects() => {
                                let reason = object.refusal(sink.name());
                                ObjectRefused { sink: sink.name(), reason: &reason }.emit(&self.metrics);
                                outcomes[i].push(Outcome::Rejected { reason });
                            }
                            _ => per_sink[s].push(i),
                        }
                    }
                }
            }
        }
        (outcomes, per_sink)
    }

    /// One verdict per record from its sinks' outcomes, the rejected ones settled first.
    async fn verdicts(
        &self,
        items: &[Item],
        outcomes: &[Vec<Outcome>],
        refusals: &[Vec<(&str, String)>],
    ) -> Vec<Verdict> {
        let mut verdicts = Vec::with_capacity(items.len());
        let mut rejected = Vec::new();
        for (i, outcome) in outcomes.iter().enumerate() {
            match combine(outcome) {
                Outcome::Delivered => verdicts.push(Verdict::Delete),
                Outcome::Failed { reason } => {
                    tracing::debug!(message_id = %items[i].record.message_id, traceparent = items[i].record.trace.as_deref(), %reason, "delivery failed for the sink's fault; holding");
                    verdicts.push(Verdict::Hold { acknowledged: Vec::new() });
                }
                // Released, and at once: only a stopping reader answers `NotStarted`.
                Outcome::Redeliver { .. } | Outcome::NotStarted => verdicts.push(Verdict::Release),
                Outcome::Rejected { reason } => {
                    rejected.push((i, reason));
                    verdicts.push(Verdict::Release);
                }
            }
        }
        for (i, verdict) in self.settle_rejected(items, rejected).await {
            // A refusal that settles nothing (no dead-letter sink, or it failed too) is a failure
            // of the sink's after all (`RefusalUnsettled` says why only then).
            if verdict != Verdict::Delete {
                for (sink, reason) in &refusals[i] {
                    RefusalUnsettled { sink, reason }.emit(&self.metrics);
                }
            }
            verdicts[i] = verdict;
        }
        verdicts
    }

    /// Poison records: stop (failOnError), the dead-letter sink, or back to the queue when there is
    /// no dead-letter sink (the queue's own redrive policy then decides). A dead-letter sink that
    /// fails is a sink's fault: the record is held and tried again.
    async fn settle_rejected(&self, items: &[Item], rejected: Vec<(usize, String)>) -> Vec<(usize, Verdict)> {
        if rejected.is_empty() {
            return Vec::new();
        }
        if self.fail_on_error {
            return rejected.into_iter().map(|(i, reason)| (i, Verdict::Stop { reason })).collect();
        }
        let Some(dead_letter) = &self.sinks.dead_letter else {
            for (i, reason) in &rejected {
                tracing::debug!(message_id = %items[*i].record.message_id, %reason,
                    "rejected and no deadLetterSink is configured; releasing");
                NoDeadLetterSink { reason }.emit(&self.metrics);
            }
            return rejected.into_iter().map(|(i, _)| (i, Verdict::Release)).collect();
        };
        let pairs: Vec<(Arc<Record>, String)> =
            rejected.iter().map(|(i, reason)| (items[*i].record.clone(), reason.clone())).collect();
        let started = Instant::now();
        let answer = dead_letter.send(&pairs).await;
        self.metrics.sink_latency(dead_letter.sink().name(), started.elapsed());
        rejected
            .iter()
            .enumerate()
            .map(|(k, (i, reason))| match answer.get(k) {
                Some(Outcome::Delivered) => {
                    let (sink, record) = (dead_letter.sink().name(), &*items[*i].record);
                    let context_left_out = leaves_context_out(record);
                    DeadLettered { sink, record, reason, context_left_out }.emit(&self.metrics);
                    (*i, Verdict::Delete)
                }
                Some(Outcome::NotStarted) => (*i, Verdict::Release),
                other => {
                    let sink = dead_letter.sink().name();
                    let reason = match other {
                        Some(
                            Outcome::Failed { reason }
                            | Outcome::Rejected { reason }
                            | Outcome::Redeliver { reason },
                        ) => reason.clone(),
                        _ => format!("dead-letter sink {sink} gave no answer for the record"),
                    };
                    tracing::debug!(message_id = %items[*i].record.message_id, %reason,
                        "dead-letter sink did not take the record; holding");
                    DeadLetterFailed { sink, reason: &reason }.emit(&self.metrics);
                    (*i, Verdict::Hold { acknowledged: Vec::new() })
                }
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
