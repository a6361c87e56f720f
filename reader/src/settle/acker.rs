//! The acker: turns the ledger's verdicts into DeleteMessageBatch and ChangeMessageVisibilityBatch
//! calls, ten receipts a call. A message never tried goes back at once (visibility 0); one whose
//! delivery failed comes back after a delay that grows with its receive count (see
//! `ledger::redelivery_delay`), so a lasting fault never turns into a hot loop.
//!
//! Why batched with a linger: a delete per message would double the requests SQS sees; waiting a
//! few milliseconds for a batch to fill costs nothing a consumer could notice.
//!
//! Failed entries are retried with backoff. A delivered message's delete that fails for SQS's
//! fault (unreachable, throttled, 5xx) is retried until it lands or the reader stops: giving it up
//! would let its visibility lapse and SQS hand it out again, a receive the message did not earn
//! (the queue's RedrivePolicy counts it) and a duplicate at the sink. Meanwhile its receipt stays
//! in the ledger, so the heartbeat keeps extending it. Once the reader stops, and for releases and
//! an epoch's confirmed deletes (whose callers decide what an unconfirmed delete means), a receipt
//! that still fails after a few attempts is given up and counted (the message becomes visible
//! again: at-least-once still holds). A failure SQS blames on the request (a stale receipt) is
//! given up at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::aws::error_type;
use crate::aws::queue::Queue;
use crate::process::backoff::backoff;
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::process::settled::Settled;
use crate::settle::events::{AckFailed, AckGivenUp};
use crate::settle::ledger::{Ledger, Receipt, Ticket, redelivery_delay};

/// SQS's limit on entries per batch call.
pub const BATCH: usize = 10;
/// Without a batching window, a part-full batch goes once no receipt came for this long, and at
/// the latest [`LINGER_CAP`] after its first: while a drain settles messages one by one, the
/// batches fill to 10 instead of going out with whatever 15 ms brought.
pub const LINGER: Duration = Duration::from_millis(15);
pub const LINGER_CAP: Duration = Duration::from_millis(60);
/// Attempts of a call that is not retried until it lands (and of a delete once the reader stops).
const ATTEMPTS: u32 = 5;
/// Backoff between attempts of a batch call: the first few close together (a passing error), then
/// slower while SQS stays away.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(10);
const MAX_CALLS_IN_FLIGHT: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Delete,
    /// Change the visibility to this many seconds (0: at once).
    Release {
        after_secs: i32,
    },
}

impl Kind {
    fn stage(self) -> &'static str {
        match self {
            Kind::Delete => "delete",
            Kind::Release { .. } => "release",
        }
    }
}

enum Command {
    Settle(Kind, Ticket, Receipt),
    /// Delete now and answer which tickets SQS confirmed (an epoch's commit needs to know).
    DeleteConfirmed(Vec<(Ticket, Receipt)>, oneshot::Sender<Vec<Ticket>>),
    Close(oneshot::Sender<()>),
}

/// The pipeline's handle: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Acker {
    tx: mpsc::UnboundedSender<Command>,
    /// Cancelled by [`Acker::close`] before it asks: the acker's loop may be waiting for room
    /// among calls that retry until this is cancelled.
    closing: CancellationToken,
}

struct Shared {
    queues: Vec<Arc<Queue>>,
    ledger: Arc<Mutex<Ledger>>,
    metrics: Arc<Metrics>,
    /// Told which deletes SQS confirmed, so their Extended Client objects go too.
    objects: Option<Arc<dyn Settled>>,
    /// How long a part-full batch waits for its next receipt: [`LINGER`], or the batching window.
    linger: Duration,
    /// How long a part-full batch waits at most: [`LINGER_CAP`], or the batching window.
    cap: Duration,
    /// Set once the acker is told to close: deletes stop retrying without bound.
    closing: CancellationToken,
}

impl Acker {
    pub fn spawn(
        queues: Vec<Arc<Queue>>,
        ledger: Arc<Mutex<Ledger>>,
        metrics: Arc<Metrics>,
        objects: Option<Arc<dyn Settled>>,
    ) -> Self {
        Self::spawn_lingering(queues, ledger, metrics, objects, LINGER)
    }

    /// The same, with part-full batches waiting up to `window` (the batching window) to fill.
    pub fn spawn_lingering(
        queues: Vec<Arc<Queue>>,
        ledger: Arc<Mutex<Ledger>>,
        metrics: Arc<Metrics>,
        objects: Option<Arc<dyn Settled>>,
        window: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (linger, cap) = if window.is_zero() { (LINGER, LINGER_CAP) } else { (window, window) };
        let closing = CancellationToken::new();
        let shared = Shared { queues, ledger, metrics, objects, linger, cap, closing: closing.clone() };
        tokio::spawn(run(rx, Arc::new(shared)));
        Self { tx, closing }
    }

    pub fn delete(&self, ticket: Ticket, receipt: Receipt) {
        let _ = self.tx.send(Command::Settle(Kind::Delete, ticket, receipt));
    }

    /// Give back a message that was never tried: visible again at once.
    pub fn release(&self, ticket: Ticket, receipt: Receipt) {
        let _ = self.tx.send(Command::Settle(Kind::Release { after_secs: 0 }, ticket, receipt));
    }

    /// Give back a message whose delivery failed on its `receive_count`-th receive: visible again
    /// after the redelivery delay for that count.
    pub fn retry_later(&self, ticket: Ticket, receipt: Receipt, receive_count: u32) {
        let after_secs = i32::try_from(redelivery_delay(receive_count).as_secs()).unwrap_or(i32::MAX);
        let _ = self.tx.send(Command::Settle(Kind::Release { after_secs }, ticket, receipt));
    }

    /// Give back a message after `after` (whole seconds, at most SQS's 12 h): a message
    /// `spec.filter` released, whose delay the pipeline chose.
    pub fn release_after(&self, ticket: Ticket, receipt: Receipt, after: Duration) {
        let after_secs = i32::try_from(after.as_secs().min(43_200)).unwrap_or(43_200);
        let _ = self.tx.send(Command::Settle(Kind::Release { after_secs }, ticket, receipt));
    }

    /// Delete these receipts at once (batched by queue, retried like every delete) and answer the
    /// tickets whose delete SQS confirmed. Empty if the acker is closed.
    pub async fn delete_confirmed(&self, batch: Vec<(Ticket, Receipt)>) -> Vec<Ticket> {
        if batch.is_empty() {
            return Vec::new();
        }
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::DeleteConfirmed(batch, done)).is_err() {
            return Vec::new();
        }
        wait.await.unwrap_or_default()
    }

    /// Send everything pending and wait for every call (retries included) to finish.
    pub async fn close(&self) {
        self.closing.cancel();
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Close(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

type Pending = HashMap<(Kind, usize), Vec<(Ticket, Receipt)>>;

async fn run(mut rx: mpsc::UnboundedReceiver<Command>, shared: Arc<Shared>) {
    let mut pending: Pending = HashMap::new();
    let mut calls = JoinSet::new();
    let mut flush_at: Option<Instant> = None;
    // When the oldest receipt still pending arrived.
    let mut first_at: Option<Instant> = None;
    loop {
        let linger = async {
            match flush_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = rx.recv() => match command {
                Some(Command::Settle(kind, ticket, receipt)) => {
                    let key = (kind, receipt.queue);
                    let batch = pending.entry(key).or_default();
                    batch.push((ticket, receipt));
                    if batch.len() >= BATCH {
                        let full = std::mem::take(batch);
                        send(&mut calls, &shared, key, full).await;
                    }
                    let now = Instant::now();
                    let first = *first_at.get_or_insert(now);
                    flush_at = Some((now + shared.linger).min(first + shared.cap));
                }
                Some(Command::DeleteConfirmed(batch, done)) => {
                    let shared = shared.clone();
                    calls.spawn(async move {
                        let mut by_queue: HashMap<usize, Vec<(Ticket, Receipt)>> = HashMap::new();
                        for (ticket, receipt) in batch {
                            by_queue.entry(receipt.queue).or_default().push((ticket, receipt));
                        }
                        let chunks = by_queue.into_iter().flat_map(|(queue, items)| {
                            items.chunks(BATCH).map(|c| (queue, c.to_vec())).collect::<Vec<_>>()
                        });
                        // Bounded like the acker's own calls: an epoch may hold thousands.
                        let confirmed: Vec<Vec<Ticket>> = futures::stream::iter(chunks)
                            .map(|(queue, chunk)| {
                                settle_with_retries(&shared, Kind::Delete, queue, chunk, Persist::Bounded)
                            })
                            .buffer_unordered(MAX_CALLS_IN_FLIGHT)
                            .collect()
                            .await;
                        let _ = done.send(confirmed.into_iter().flatten().collect());
                    });
                }
                Some(Command::Close(done)) => {
                    shared.closing.cancel();
                    flush(&mut calls, &shared, &mut pending).await;
                    while calls.join_next().await.is_some() {}
                    if let Some(objects) = &shared.objects {
                        objects.close().await;
                    }
                    let _ = done.send(());
                    return;
                }
                None => {
                    shared.closing.cancel();
                    flush(&mut calls, &shared, &mut pending).await;
                    while calls.join_next().await.is_some() {}
                    return;
                }
            },
            () = linger => {
                flush(&mut calls, &shared, &mut pending).await;
                (flush_at, first_at) = (None, None);
            }
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
        }
    }
}

async fn flush(calls: &mut JoinSet<()>, shared: &Arc<Shared>, pending: &mut Pending) {
    let keys: Vec<(Kind, usize)> = pending.iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| *k).collect();
    for key in keys {
        let batch = pending.remove(&key).unwrap_or_default();
        for chunk in batch.chunks(BATCH) {
            send(calls, shared, key, chunk.to_vec()).await;
        }
    }
}

/// Start one batch call, waiting first if too many are in flight.
async fn send(
    calls: &mut JoinSet<()>,
    shared: &Arc<Shared>,
    (kind, queue): (Kind, usize),
    batch: Vec<(Ticket, Receipt)>,
) {
    while calls.len() >= MAX_CALLS_IN_FLIGHT {
        calls.join_next().await;
    }
    let shared = shared.clone();
    calls.spawn(async move {
        let persist = if kind == Kind::Delete { Persist::UntilClosing } else { Persist::Bounded };
        settle_with_retries(&shared, kind, queue, batch, persist).await;
    });
}

/// How long a call's retryable failures are retried.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Persist {
    /// [`ATTEMPTS`] attempts.
    Bounded,
    /// Until the acker closes, then [`ATTEMPTS`] more.
    UntilClosing,
}

/// Answers the tickets that succeeded.
async fn settle_with_retries(
    shared: &Shared,
    kind: Kind,
    queue: usize,
    mut batch: Vec<(Ticket, Receipt)>,
    persist: Persist,
) -> Vec<Ticket> {
    let stage = kind.stage();
    // The attempts are counted here, not by a retry wrapper: each one sends only the entries
    // that failed before.
    let mut delays = backoff(FIRST_RETRY, LONGEST_RETRY);
    let mut succeeded = Vec::new();
    let mut bounded_attempts = 0;
    loop {
        let failed = call(shared, kind, queue, &batch).await;
        let done: Vec<Ticket> =
            batch.iter().map(|(t, _)| *t).filter(|t| !failed.iter().any(|(f, _)| f == t)).collect();
        finish(shared, kind, &done);
        succeeded.extend(done);
        let (retry, give_up): (Vec<_>, Vec<_>) = failed.into_iter().partition(|(_, retryable)| *retryable);
        if !give_up.is_empty() {
            let (queue_url, messages) = (&shared.queues[queue].url, give_up.len() as u64);
            AckGivenUp { stage, queue_url, why: "not_retryable", messages }.emit(&shared.metrics);
        }
        forget(shared, &give_up.iter().map(|(t, _)| *t).collect::<Vec<_>>());
        batch.retain(|(t, _)| retry.iter().any(|(r, _)| r == t));
        if batch.is_empty() {
            return succeeded;
        }
        if persist == Persist::Bounded || shared.closing.is_cancelled() {
            bounded_attempts += 1;
            if bounded_attempts >= ATTEMPTS {
                break;
            }
        }
        let delay = delays.next().unwrap_or(LONGEST_RETRY);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            // Closing: the rest of the attempts go at the short pace, so a drain is not held
            // by a long backoff.
            () = shared.closing.cancelled(), if persist == Persist::UntilClosing && !shared.closing.is_cancelled() => {
                delays = backoff(FIRST_RETRY, FIRST_RETRY * 8);
            }
        }
    }
    let (queue_url, messages) = (&shared.queues[queue].url, batch.len() as u64);
    AckGivenUp { stage, queue_url, why: "gave_up", messages }.emit(&shared.metrics);
    forget(shared, &batch.iter().map(|(t, _)| *t).collect::<Vec<_>>());
    succeeded
}

/// One batch call; returns the tickets that failed and whether each may be retried.
async fn call(shared: &Shared, kind: Kind, queue: usize, batch: &[(Ticket, Receipt)]) -> Vec<(Ticket, bool)> {
    let q = &shared.queues[queue];
    let result = match kind {
        Kind::Delete => {
            let entries = batch.iter().map(|(t, r)| {
                DeleteMessageBatchRequestEntry::builder().id(t.to_string()).receipt_handle(&r.handle).build()
            });
            q.client
                .delete_message_batch()
                .queue_url(q.url.as_ref())
                .set_entries(Some(entries.collect::<Result<Vec<_>, _>>().unwrap_or_default()))
                .send()
                .await
                .map(|out| out.failed)
                .map_err(|e| error_type(&e))
        }
        Kind::Release { after_secs } => {
            let entries = batch.iter().map(|(t, r)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(t.to_string())
                    .receipt_handle(&r.handle)
                    .visibility_timeout(after_secs)
                    .build()
            });
            q.client
                .change_message_visibility_batch()
                .queue_url(q.url.as_ref())
                .set_entries(Some(entries.collect::<Result<Vec<_>, _>>().unwrap_or_default()))
                .send()
                .await
                .map(|out| out.failed)
                .map_err(|e| error_type(&e))
        }
    };
    let stage = kind.stage();
    match result {
        Ok(failed) => failed
            .into_iter()
            .filter_map(|f| {
                AckFailed { stage, queue_url: &q.url, code: &f.code, entries: 1 }.emit(&shared.metrics);
                let retryable = !f.sender_fault;
                f.id.parse::<Ticket>().ok().map(|t| (t, retryable))
            })
            .collect(),
        Err(kind) => {
            AckFailed { stage, queue_url: &q.url, code: &kind, entries: 1 }.emit(&shared.metrics);
            batch.iter().map(|(t, _)| (*t, true)).collect()
        }
    }
}

fn finish(shared: &Shared, kind: Kind, done: &[Ticket]) {
    if done.is_empty() {
        return;
    }
    match kind {
        Kind::Delete => {
            shared.metrics.deleted.inc_by(done.len() as u64);
            // Only what SQS confirmed: a failed entry's message comes back and needs its object.
            if let Some(objects) = &shared.objects {
                objects.deleted(done);
            }
        }
        Kind::Release { .. } => {
            shared.metrics.released.inc_by(done.len() as u64);
        }
    }
    forget(shared, done);
}

fn forget(shared: &Shared, tickets: &[Ticket]) {
    if tickets.is_empty() {
        return;
    }
    if let Some(objects) = &shared.objects {
        objects.returned(tickets);
    }
    let mut ledger = shared.ledger.lock().unwrap_or_else(|e| e.into_inner());
    for t in tickets {
        ledger.forget(*t);
    }
    shared.metrics.in_flight.set(ledger.len() as i64);
}
