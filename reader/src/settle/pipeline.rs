//! The pipeline's shared state past intake, and the one place where verdicts become ledger
//! transitions and acker calls.
//!
//! Why settling lives here: the step from "the sink said Delivered" to "delete this receipt" must
//! happen without an await in between (a drain that drops a delivery task mid-way must find the
//! message either settled or still in work, never half way), and every poller uses the same rule.
//! Tagged messages are reported to the [`Gate`] after the ledger, so an epoch can only close on
//! messages the ledger holds.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::acker::Acker;
use super::events::{DeliveryPanicked, HeldPastVisibilityCap};
use super::gate::Gate;
use super::held::Claim;
use super::ledger::{Ledger, Tag, Ticket, redelivery_delay};
use crate::aws::visibility::HOLD_LIMIT;
use crate::deliver::dispatch::{Dispatcher, Item, Verdict};
use crate::process::backoff::{LONGEST_HOLD_RETRY, hold_backoff};
use crate::process::error::Error;
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;
use crate::sink::circuit::Turn;

/// How one delivery round of a batch ended.
enum Round {
    /// Done; these indexes are held for a sink's fault, each with the sinks that took it in
    /// this round.
    Held(Vec<(usize, Vec<usize>)>),
    /// The drain's deadline passed: dropped.
    Aborted,
}

pub struct Pipeline {
    pub(super) dispatcher: Dispatcher,
    ledger: Arc<Mutex<Ledger>>,
    pub(super) acker: Acker,
    pub(super) metrics: Arc<Metrics>,
    stop: Stop,
    pub(super) gate: Arc<dyn Gate>,
    /// Cancelled when the drain deadline passes: deliveries still running are dropped.
    pub(super) abort: CancellationToken,
    pub(super) deliveries: TaskTracker,
}

/// One received message to admit: id, receipt handle, and its tag.
pub struct Arrival {
    pub message_id: String,
    pub handle: String,
    pub tag: Tag,
}

impl Pipeline {
    pub fn new(
        dispatcher: Dispatcher,
        ledger: Arc<Mutex<Ledger>>,
        acker: Acker,
        metrics: Arc<Metrics>,
        stop: Stop,
        gate: Arc<dyn Gate>,
    ) -> Self {
        let (abort, deliveries) = (CancellationToken::new(), TaskTracker::new());
        Self { dispatcher, ledger, acker, metrics, stop, gate, abort, deliveries }
    }

    pub(super) fn lock_ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// May a poller receive a batch of up to `batch` messages now: the gate lets it, and no
    /// circuit of a sink the source's messages go to is open (`sink::circuit`). Any, not only the
    /// sink of the next message: SQS cannot receive selectively, and what a receive brings for
    /// an open sink could only be held.
    pub fn may_receive(&self, batch: usize) -> bool {
        let sinks = self.dispatcher.sinks();
        self.gate.may_receive(batch)
            && !sinks.circuits.blocks_receiving(sinks.sinks.iter().map(|s| s.sink.name()))
    }

    /// Messages held (received, not yet deleted or released).
    pub fn in_flight(&self) -> usize {
        self.lock_ledger().len()
    }

    /// Wait until every delete and release handed to the acker is sent (end of a drain).
    pub async fn close_acker(&self) {
        self.acker.close().await;
    }

    /// Record received messages in the ledger; returns a ticket for each.
    pub fn admit(&self, queue: usize, arrivals: &[Arrival], visibility: Duration) -> Vec<Ticket> {
        let now = Instant::now();
        let mut ledger = self.lock_ledger();
        let admitted: Vec<Ticket> = arrivals
            .iter()
            .map(|a| {
                let admitted = ledger.admit(queue, &a.message_id, a.handle.clone(), a.tag, now, visibility);
                if admitted.redelivered {
                    self.metrics.duplicates.inc();
                }
                admitted.ticket
            })
            .collect();
        self.metrics.in_flight.set(ledger.len() as i64);
        admitted
    }

    /// Deliver `items` in a task of its own, so the poller can poll again meanwhile. Each message
    /// is settled (deleted or released, its room in `claim` given back) as soon as its own
    /// delivery ends, not when the slowest message of its receive batch does: a crash then
    /// redelivers only what was really still in work.
    ///
    /// A message whose delivery failed for a sink's fault (`Verdict::Hold`) is not settled: it
    /// stays in the ledger (the heartbeat keeps it invisible) and in `claim` (so it counts against
    /// what the reader holds), and is delivered again in rounds, only to the sinks that have not
    /// taken it yet (`Item::acknowledged`: a routed message's healthy sinks get it once however
    /// long another's outage lasts), as those sinks' circuits let it
    /// (`sink::circuit::Circuits::wait_turn`: after a backoff of 1 s doubling to 30 s, jittered; while a
    /// circuit is open, only as its probe; at once when it closes), without limit while the
    /// reader runs. It goes back to the queue only on a stop, or when [`HOLD_LIMIT`] since the
    /// receive nears SQS's 12 h visibility cap.
    pub fn deliver(self: &Arc<Self>, tickets: Vec<Ticket>, mut items: Vec<Item>, fifo: bool, claim: Claim) {
        let pipeline = self.clone();
        self.deliveries.spawn(async move {
            let received = Instant::now();
            let mut claim = claim;
            let mut pending: Vec<usize> = (0..items.len()).collect();
            let mut delays = hold_backoff();
            let mut delay = Duration::ZERO;
            while !pending.is_empty() {
                let targets = pipeline.dispatcher.target_names(pending.iter().map(|&i| &items[i]));
                let circuits = &pipeline.dispatcher.sinks().circuits;
                let turn =
                    circuits.wait_turn(&targets, delay, pipeline.stop.token(), &pipeline.metrics).await;
                if turn == Turn::Stopped {
                    pipeline.hand_back(&pending, &tickets, &items, &mut claim, Verdict::Release);
                    return;
                }
                let round = pipeline.round(&pending, &tickets, &items, fifo, &mut claim).await;
                if let Turn::Probe(sinks) = &turn {
                    circuits.probe_done(sinks);
                }
                pending = match round {
                    Round::Held(held) => held
                        .into_iter()
                        .map(|(i, took)| {
                            items[i].acknowledged.extend(took);
                            i
                        })
                        .collect(),
                    Round::Aborted => return,
                };
                delay = delays.next().unwrap_or(LONGEST_HOLD_RETRY);
                if !pending.is_empty() && received.elapsed() + delay >= HOLD_LIMIT {
                    HeldPastVisibilityCap { messages: pending.len() }.emit(&pipeline.metrics);
                    pipeline.hand_back(&pending, &tickets, &items, &mut claim, Verdict::Release);
                    return;
                }
            }
        });
    }

    /// One delivery of `pending` (indexes into `items`): settles what is settled, and answers the
    /// indexes held for a sink's fault. A panicking sink must not strand its messages in the
    /// ledger (the heartbeat would keep them invisible until the reader exits): they are
    /// released instead.
    async fn round(
        &self,
        pending: &[usize],
        tickets: &[Ticket],
        items: &[Item],
        fifo: bool,
        claim: &mut Claim,
    ) -> Round {
        let subset: Vec<Item> = pending.iter().map(|&i| items[i].clone()).collect();
        let mut open = vec![true; subset.len()];
        let mut held = Vec::new();
        let settle_each = AssertUnwindSafe(async {
            let mut settled = self.dispatcher.settle_as_done(&subset, fifo);
            while let Some(part) = settled.next().await {
                for (k, verdict) in part {
                    open[k] = false;
                    let i = pending[k];
                    if let Verdict::Hold { acknowledged } = verdict {
                        held.push((i, acknowledged));
                        continue;
                    }
                    self.settle(&tickets[i..=i], std::slice::from_ref(&verdict), &items[i..=i]);
                    // Room comes back message by message, as each one is settled.
                    claim.settle_one(items[i].record.size_bytes() as u64);
                }
            }
        })
        .catch_unwind();
        let panicked = tokio::select! {
            () = self.abort.cancelled() => return Round::Aborted,
            result = settle_each => result.is_err(),
        };
        if panicked {
            let left: Vec<usize> = (0..subset.len()).filter(|&k| open[k]).map(|k| pending[k]).collect();
            DeliveryPanicked { messages: left.len() }.emit(&self.metrics);
            let tickets: Vec<Ticket> = left.iter().map(|&i| tickets[i]).collect();
            let items: Vec<Item> = left.iter().map(|&i| items[i].clone()).collect();
            self.release(&tickets, &items);
        }
        held.sort_unstable_by_key(|(i, _)| *i);
        Round::Held(held)
    }

    /// Settle the held `pending` with `verdict` (a release: at once when stopping, else with the
    /// receive-count delay) and give their room back.
    fn hand_back(
        &self,
        pending: &[usize],
        tickets: &[Ticket],
        items: &[Item],
        claim: &mut Claim,
        verdict: Verdict,
    ) {
        for &i in pending {
            self.settle(&tickets[i..=i], std::slice::from_ref(&verdict), &items[i..=i]);
            claim.settle_one(items[i].record.size_bytes() as u64);
        }
    }

    /// Wait for every delivery until `deadline`; past it, drop those still running. `false`: the
    /// deadline passed.
    pub async fn finish_deliveries(&self, deadline: tokio::time::Instant) -> bool {
        self.deliveries.close();
        if tokio::time::timeout_at(deadline, self.deliveries.wait()).await.is_ok() {
            return true;
        }
        tracing::warn!("drain deadline reached: releasing deliveries still running");
        self.abort.cancel();
        self.deliveries.wait().await;
        false
    }

    /// Apply one verdict per ticket, then tell the gate which tagged messages are settled.
    pub fn settle(&self, tickets: &[Ticket], verdicts: &[Verdict], items: &[Item]) {
        {
            let mut ledger = self.lock_ledger();
            for ((ticket, verdict), item) in tickets.iter().zip(verdicts).zip(items) {
                let receipt = match verdict {
                    Verdict::Delete => ledger.acked(*ticket),
                    // A held message reaches here only by mistake: it goes back at once.
                    Verdict::Release | Verdict::Hold { .. } => ledger.release(*ticket),
                    // Left in work: the drain hands it back (`release_all`) once the pollers have
                    // stopped. Released now, it would be visible again while long polls of this
                    // very reader are still out, and one abandoned at the stop would hide it for a
                    // whole visibility timeout from whoever runs next.
                    Verdict::Stop { .. } => None,
                };
                match (verdict, receipt) {
                    (Verdict::Delete, Some(receipt)) => self.acker.delete(*ticket, receipt),
                    // A message released for its own fault comes back later (growing with its
                    // receive count). Once the reader is stopping, a release is a hand-back (held,
                    // or never started): at once, for whoever runs next.
                    (Verdict::Release, Some(receipt)) if !self.stop.token().is_cancelled() => {
                        self.acker.retry_later(*ticket, receipt, item.record.receive_count)
                    }
                    (_, Some(receipt)) => self.acker.release(*ticket, receipt),
                    (_, None) => {}
                }
                if let Verdict::Stop { reason } = verdict {
                    let id = &item.record.message_id;
                    tracing::error!(message_id = %id, %reason, "rejected with failOnError: stopping the reader");
                    self.stop.fail(Error::FailOnError { message_id: id.clone(), reason: reason.clone() });
                }
            }
        }
        for (verdict, item) in verdicts.iter().zip(items) {
            self.settled(item, *verdict == Verdict::Delete);
        }
    }

    /// Release these tickets (received while stopping, dropped by the limiter wait, a panicking
    /// sink); tagged ones are settled as not delivered.
    pub fn release(&self, tickets: &[Ticket], items: &[Item]) {
        self.release_tickets(tickets);
        for item in items {
            self.settled(item, false);
        }
    }

    /// A message `spec.filter` turned away with `onMismatch: release`, for another consumer:
    /// visible again after `floor` or the redelivery delay for its receive count, whichever is
    /// longer, so a message no reader takes never spins between receives (at once when the
    /// reader is stopping, as every hand-back). Tagged ones are settled as not delivered.
    pub fn release_unwanted(&self, ticket: Ticket, item: &Item, floor: Duration) {
        let receipt = self.lock_ledger().release(ticket);
        if let Some(receipt) = receipt {
            if self.stop.token().is_cancelled() {
                self.acker.release(ticket, receipt);
            } else {
                let delay = floor.max(redelivery_delay(item.record.receive_count));
                self.acker.release_after(ticket, receipt, delay);
            }
        }
        self.settled(item, false);
    }

    fn settled(&self, item: &Item, delivered: bool) {
        let r = &item.record;
        if r.epoch != 0 {
            self.gate.settled(Tag { incarnation: r.incarnation, epoch: r.epoch }, &r.message_id, delivered);
        }
    }

    /// Release untagged tickets.
    pub fn release_tickets(&self, tickets: &[Ticket]) {
        let mut ledger = self.lock_ledger();
        for ticket in tickets {
            if let Some(receipt) = ledger.release(*ticket) {
                self.acker.release(*ticket, receipt);
            }
        }
    }

    /// Everything not acknowledged goes back to the queue (end of a drain).
    pub fn release_all(&self) -> usize {
        let due = self.lock_ledger().release_all();
        let n = due.len();
        for (ticket, receipt) in due {
            self.acker.release(ticket, receipt);
        }
        n
    }
}
