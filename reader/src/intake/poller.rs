//! A poller: one long-poll loop on one queue, from ReceiveMessage to a spawned delivery.
//!
//! Why receiving and delivering are split: a poller that waited for its sinks would leave the
//! queue idle for the sink's whole round trip; instead it hands the batch to a delivery task and
//! polls again, while the bound on what the reader holds (`settle::held`, set by
//! `intake::pacing`) keeps it from taking more than it can deliver soon. Room is claimed before a
//! receive, so a long poll in progress always has room for what it brings. On a stop it
//! lets a receive already on the wire land, however long its wait still runs, and releases what
//! it brought, so those messages are visible again at once rather than after their visibility
//! timeout (`Poller::land_after_stop` says why it does not hang up early).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use sluice_protocol::now_ms;
use tracing::Instrument;

use super::context::Intake;
use super::decode::{Decoded, decode};
use super::filtering::mark_routes;
use super::receive::{random_attempt_id, receive_once};
use super::window::{Quiet, Turn as WindowTurn};
use crate::deliver::dispatch::{Item, Verdict};
use crate::payload::events::ObjectUnreadable;
use crate::payload::{Resolution, Resolver, hold, pointer};
use crate::process::backoff::backoff;
use crate::process::events::receive::ReceiveFailed;
use crate::process::events::{Event, Fault};
use crate::process::metrics::queue_name;
use crate::process::stop::Stop;
use crate::record::Record;
use crate::settle::Arrival;
use crate::settle::held::Claim;
use crate::settle::ledger::Ticket;

/// How often a poller looks again whether the gate lets it receive.
const GATE_WAIT: Duration = Duration::from_millis(100);

/// Backoff after a failed receive.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LONGEST_RETRY: Duration = Duration::from_secs(20);

pub struct Poller {
    pub id: usize,
    /// What the queue's pollers share.
    pub intake: Arc<Intake>,
    /// Cancelled when the queue needs one poller fewer: it ends before its next receive.
    pub retire: tokio_util::sync::CancellationToken,
    /// Shared by the queue's pollers: what they waited for before receiving again.
    pub waits: Arc<Waits>,
}

/// Time a queue's pollers spent between a receive's answer and the next receive waiting for room
/// or for the rate limit, for the poller count: waiting for room says the sinks are the limit,
/// waiting for the rate limit says it is; either way more pollers would not help.
#[derive(Debug, Default)]
pub struct Waits {
    room_us: AtomicU64,
    rate_us: AtomicU64,
    /// The batching window's turns (`intake::window`): the queue's pollers share them.
    quiet: Quiet,
}

impl Waits {
    fn add(counter: &AtomicU64, since: Instant) {
        counter.fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Waited for room and for the rate limit since the last call.
    pub fn take(&self) -> (Duration, Duration) {
        let take = |c: &AtomicU64| Duration::from_micros(c.swap(0, Ordering::Relaxed));
        (take(&self.room_us), take(&self.rate_us))
    }
}

/// What one turn of the loop brought.
enum Turn {
    /// A batch, with the room it holds and when it landed; `stopping`: it landed after the stop.
    Received {
        claim: Claim,
        messages: Vec<Message>,
        landed: Instant,
        stopping: bool,
    },
    /// Nothing to hand off (empty receive, or a failure already waited out).
    Again,
    Stop,
}

/// What carries over from one receive to the next.
struct Retry {
    backoff: Box<dyn Iterator<Item = Duration> + Send>,
    /// FIFO: the same attempt id is sent again after a failed receive, so SQS returns the same
    /// messages instead of hiding them for a visibility timeout.
    attempt_id: Option<String>,
    /// The batching window: not before this instant is the next receive sent.
    resume_at: Option<Instant>,
    /// Held while the queue is quiet and this poller is the one receiving.
    turn: Option<WindowTurn>,
    /// The receive now out was sent after a pause.
    waited: bool,
}

impl Poller {
    /// Poll until retired or stopped, every line logged meanwhile carrying the queue: one span
    /// for the poller's whole life, not one per receive, so the hot path pays nothing for it.
    pub async fn run(self) {
        let span = tracing::info_span!("poll", queue = queue_name(&self.intake.queue.url), poller = self.id);
        self.poll().instrument(span).await;
    }

    async fn poll(self) {
        self.intake.metrics.declare_queue(&self.intake.queue.url);
        if self.intake.filter.is_some() {
            self.intake.metrics.filter.declare(&self.intake.queue.url);
        }
        let backoff = Box::new(backoff(FIRST_RETRY, LONGEST_RETRY));
        let mut retry = Retry { backoff, attempt_id: None, resume_at: None, turn: None, waited: false };
        while !self.retire.is_cancelled() {
            match self.next_batch(&mut retry).await {
                Turn::Received { claim, messages, landed, stopping } => {
                    if !self.hand_off(claim, messages, landed, stopping).await {
                        break;
                    }
                }
                Turn::Again => {}
                Turn::Stop => break,
            }
        }
        tracing::debug!(poller = self.id, queue = %self.intake.queue.url, "poller stopped");
    }

    /// Wait for the gate and for room, then receive once.
    async fn next_batch(&self, retry: &mut Retry) -> Turn {
        let stop = &self.intake.stop;
        let max = self.intake.receive.max_messages as u32;
        if !self.wait_for_gate(stop).await || !self.pace(retry, stop).await {
            return Turn::Stop;
        }
        let claim = match self.intake.held.try_claim(max as usize) {
            Some(claim) => claim,
            None => {
                let since = Instant::now();
                let claim = tokio::select! {
                    biased;
                    () = stop.stopped() => return Turn::Stop,
                    claim = self.intake.held.claim(max as usize) => claim,
                };
                Waits::add(&self.waits.room_us, since);
                claim
            }
        };
        if self.intake.queue.fifo && retry.attempt_id.is_none() {
            retry.attempt_id = Some(random_attempt_id());
        }
        let metrics = &self.intake.metrics;
        let mut receive = std::pin::pin!(receive_once(
            &self.intake.queue,
            &self.intake.receive,
            retry.attempt_id.clone(),
            metrics
        ));
        let (answer, stopping) = tokio::select! {
            biased;
            answer = &mut receive => (answer, false),
            () = stop.stopped() => (land_after_stop(&mut receive).await, true),
        };
        let messages = match answer {
            Ok(out) => {
                metrics.health.receive_answered(queue_name(&self.intake.queue.url));
                retry.backoff = Box::new(backoff(FIRST_RETRY, LONGEST_RETRY));
                retry.attempt_id = None;
                let messages = out.messages.unwrap_or_default();
                let window = self.intake.receive.batch_window;
                let pause =
                    self.waits.quiet.after_receive(window, messages.len(), max as usize, retry.waited);
                retry.resume_at = (!pause.is_zero()).then(|| Instant::now() + pause);
                messages
            }
            Err(_) if stopping => return Turn::Stop,
            Err(error) => {
                let delay = retry.backoff.next().unwrap_or(LONGEST_RETRY);
                ReceiveFailed { queue_url: &self.intake.queue.url, error: &error, retry_in: delay }
                    .emit(metrics);
                return tokio::select! {
                    () = stop.stopped() => Turn::Stop,
                    () = tokio::time::sleep(delay) => Turn::Again,
                };
            }
        };
        if messages.is_empty() {
            metrics.empty_receive(&self.intake.queue.url);
            return if stopping { Turn::Stop } else { Turn::Again };
        }
        tracing::debug!(messages = messages.len(), "received");
        Turn::Received { claim, messages, landed: Instant::now(), stopping }
    }

    /// The batching window before a receive: on a quiet queue wait for this poller's turn, then
    /// until the pause after its last part-full receive is over. `false`: stopped or retired.
    async fn pace(&self, retry: &mut Retry, stop: &Stop) -> bool {
        let quiet = &self.waits.quiet;
        retry.waited = false;
        if !quiet.is_quiet() {
            retry.turn = None;
            retry.resume_at = None;
            return true;
        }
        if retry.turn.is_none() {
            retry.turn = tokio::select! {
                biased;
                () = stop.stopped() => return false,
                () = self.retire.cancelled() => return false,
                turn = quiet.take_turn() => Some(turn),
            };
        }
        if let Some(at) = retry.resume_at.take() {
            retry.waited = true;
            tokio::select! {
                biased;
                () = stop.stopped() => return false,
                () = tokio::time::sleep_until(at.into()) => {}
            }
        }
        true
    }

    /// Admit a received batch, wait for the rate limit, and hand it to a delivery task. `false`:
    /// the reader is stopping (what was received is released).
    async fn hand_off(
        &self,
        mut claim: Claim,
        messages: Vec<Message>,
        landed: Instant,
        stopping: bool,
    ) -> bool {
        let (tickets, items) = self.take_in(messages).await;
        let bytes: usize = items.iter().map(|i| i.record.size_bytes()).sum();
        claim.keep(items.len(), bytes as u64);
        // The rate limit counts what is delivered: a streamed object's size, not its empty body.
        let content: u64 = items.iter().map(|i| i.record.content_bytes()).sum();
        if stopping {
            self.intake.pipeline.release(&tickets, &items);
            return false;
        }
        if items.is_empty() {
            return true;
        }
        let since = Instant::now();
        tokio::select! {
            biased;
            () = self.intake.stop.stopped() => {
                self.intake.pipeline.release(&tickets, &items);
                return false;
            }
            () = self.intake.limiter.acquire(items.len(), usize::try_from(content).unwrap_or(usize::MAX)) => {}
        }
        Waits::add(&self.waits.rate_us, since);
        self.intake.metrics.held.waited(items.len(), landed.elapsed());
        self.intake.metrics.report.waited(
            items.iter().map(|i| i.record.sent_timestamp_ms),
            landed.elapsed(),
            now_ms(),
        );
        self.intake.pipeline.deliver(tickets, items, self.intake.queue.fifo, claim);
        true
    }

    /// Wait while the gate says not to receive (under exactlyOnce: joining, fenced, lease lost,
    /// or as many ids pending as a lease may record), or while the circuit of any sink the
    /// source's messages go to is open (`sink::circuit`). Any, not only the sink of the next
    /// message: SQS cannot receive selectively, and what a receive brings for an open sink could
    /// only be held. A long poll already out when a circuit opens lands, and its messages are
    /// held. `false`: stopped meanwhile.
    async fn wait_for_gate(&self, stop: &Stop) -> bool {
        while !self.intake.pipeline.may_receive(self.intake.receive.max_messages as usize) {
            tokio::select! {
                () = stop.stopped() => return false,
                () = tokio::time::sleep(GATE_WAIT) => {}
            }
        }
        true
    }

    /// Admit the messages to the ledger, decode them and judge them by `spec.filter`
    /// (`intake::filtering`: a mismatch is settled here, or marked for its route sink). The gate
    /// sorts them first (under exactlyOnce a redelivery of an acked message is not delivered
    /// again): only those it returns are tagged and delivered.
    async fn take_in(&self, messages: Vec<Message>) -> (Vec<Ticket>, Vec<Item>) {
        let metrics = &self.intake.metrics;
        let usable: Vec<Message> = messages
            .into_iter()
            .filter(|m| {
                let ok = m.receipt_handle().is_some() && m.message_id().is_some();
                if !ok {
                    metrics.fault(Fault::MessageWithoutIdOrReceipt);
                }
                ok
            })
            .collect();
        let sent_ms: Vec<i64> = usable.iter().filter_map(sent_timestamp_ms).collect();
        let bytes: usize = usable.iter().map(|m| m.body().map_or(0, str::len)).sum();
        metrics.received(&self.intake.queue.url, usable.len() as u64, bytes as u64, &sent_ms, now_ms());
        metrics.report.received(&sent_ms, now_ms());
        let usable = self.intake.pipeline.sort(&self.intake.queue, usable).await;
        let arrivals: Vec<Arrival> = usable
            .iter()
            .map(|(m, tag)| Arrival {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                handle: m.receipt_handle().unwrap_or_default().to_owned(),
                tag: *tag,
            })
            .collect();
        let admitted =
            self.intake.pipeline.admit(self.intake.queue.index, &arrivals, self.intake.queue.visibility);
        let mut decoded = Vec::with_capacity(usable.len());
        for ((message, tag), ticket) in usable.into_iter().zip(admitted) {
            let (mut record, poison) =
                match decode(message, &self.intake.queue.url, self.intake.payload, tag.epoch) {
                    Decoded::Ok(r) => (r, None),
                    Decoded::Poison(r, reason) => {
                        metrics.fault(Fault::InvalidPayload);
                        (r, Some(reason))
                    }
                };
            record.incarnation = tag.incarnation;
            decoded.push((ticket, record, poison));
        }
        // `spec.filter`: before any payload is fetched (a message turned away costs no GetObject).
        let (decoded, routed) = match &self.intake.filter {
            Some(filter) => filter.apply(&self.intake, decoded),
            None => (decoded, Vec::new()),
        };
        let (tickets, mut items) = match &self.intake.resolver {
            None => decoded
                .into_iter()
                .map(|(ticket, record, poison)| (ticket, Item::new(record, poison)))
                .unzip(),
            Some(resolver) => self.resolve(resolver, decoded).await,
        };
        mark_routes(&tickets, &mut items, &routed);
        (tickets, items)
    }

    /// Fetch the payloads S3 notifications and Extended Client pointers name. A fetch that fails
    /// for S3's fault holds the message here, and with it this poller's receiving, until S3
    /// answers (`payload::hold`: why here and not in a delivery task). A TestEvent (deleted) and a
    /// message handed back by a stop (released) are settled here and go no further; what a decode
    /// already found poison is not resolved.
    async fn resolve(
        &self,
        resolver: &Resolver,
        decoded: Vec<(Ticket, Record, Option<String>)>,
    ) -> (Vec<Ticket>, Vec<Item>) {
        let metrics = &self.intake.metrics;
        let objects = self.intake.objects.as_ref();
        let (stop, received) = (&self.intake.stop, Instant::now());
        let resolved =
            futures::future::join_all(decoded.into_iter().map(|(ticket, record, poison)| async move {
                match poison {
                    Some(reason) => (ticket, Err((record, reason))),
                    None => {
                        // Read before the fetch replaces the body: the object to delete with the message.
                        let object =
                            objects.and_then(|_| pointer::parse(&record.body, &record.message_attributes));
                        let resolution = hold::resolve(resolver, record, received, stop, metrics).await;
                        (ticket, Ok((resolution, object)))
                    }
                }
            }))
            .await;
        let mut tickets = Vec::with_capacity(resolved.len());
        let mut items = Vec::with_capacity(resolved.len());
        for (ticket, resolution) in resolved {
            let resolution = match resolution {
                Ok((Resolution::Deliver(record), object)) => {
                    if let (Some(objects), Some(object)) = (objects, object) {
                        objects.remember(ticket, object);
                    }
                    Resolution::Deliver(record)
                }
                Ok((resolution, _)) => resolution,
                Err((record, reason)) => {
                    tickets.push(ticket);
                    items.push(Item::new(record, Some(reason)));
                    continue;
                }
            };
            let (item, settle) = match resolution {
                Resolution::Deliver(record) => (Item::new(record, None), None),
                Resolution::Poison(record, reason) => {
                    ObjectUnreadable { reason: &reason }.emit(metrics);
                    (Item::new(record, Some(reason)), None)
                }
                Resolution::Acknowledge(record) => (Item::new(record, None), Some(Verdict::Delete)),
                // Held until the reader stopped (or nearly SQS's visibility cap): `hold` said so.
                Resolution::Release(record, _) => (Item::new(record, None), Some(Verdict::Release)),
            };
            match settle {
                Some(verdict) => self.intake.pipeline.settle(&[ticket], &[verdict], &[item]),
                None => {
                    tickets.push(ticket);
                    items.push(item);
                }
            }
        }
        (tickets, items)
    }
}

/// Let a receive that was on the wire at the stop land, however long its wait still runs (at
/// most `receive.waitTimeSeconds`; past the drain's deadline the pollers are aborted).
///
/// Why not hang up early, even with nothing to hand back: SQS keeps a long poll open after the
/// client hangs up and hands it whatever becomes visible until its wait ends, and what it hands
/// out stays hidden for a whole visibility timeout. Above all that is what turns visible at the
/// stop: what this reader and, in a scale-in, the readers draining beside it hand back at that
/// very moment. Landed, whatever the receive brought is handed back at once (`hand_off`). So an
/// idle reader stops when its long polls end, not at once.
async fn land_after_stop<F: Future + Unpin>(receive: &mut F) -> F::Output {
    receive.await
}

/// SentTimestamp, in milliseconds since the Unix epoch, when SQS returned it.
fn sent_timestamp_ms(message: &Message) -> Option<i64> {
    message.attributes()?.get(&MessageSystemAttributeName::SentTimestamp)?.parse().ok()
}
