//! The pipeline's side of the checkpoint protocol (exactlyOnce): carries out the [`Work`] the
//! coordination [`Driver`] hands out, on the sinks, the ledger and the acker, and answers it.
//!
//! Why one worker, in order: an epoch's steps must happen in protocol order (pre-commit before the
//! ack, commit before the deletes), and a later epoch's commit must never overtake an earlier one;
//! one task taking the work in the order the driver issued it gives that without locks. Sink calls
//! are retried here (they are idempotent by contract) because the protocol has no other way to
//! learn that a pre-commit or commit failed: an epoch whose commit never finishes would hold its
//! receipts and its lease entry forever.
//!
//! The same worker serves both backends: standalone (in-process coordinator) and cluster
//! (ConfigMap leases); it never knows which.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::checkpoint::{EpochKey, IdSet};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::coordination::{Driver, Work, now_ms};
use crate::ledger::{Tag, Ticket};
use crate::pipeline::Pipeline;
use crate::sink::{Sink, SinkError};

/// Backoff between attempts of a failed sink call: grows to this bound.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
/// Attempts at aborting an epoch in a sink (best effort: an aborted output is never made
/// visible anyway; this only frees what the sink staged).
const ABORT_ATTEMPTS: u32 = 3;

/// The ledger tag of an epoch key.
pub fn tag_of(key: &EpochKey) -> Tag {
    Tag { incarnation: key.incarnation.0, epoch: key.epoch }
}

pub struct EpochWorker {
    pub pipeline: Arc<Pipeline>,
    pub driver: Arc<Driver>,
    /// When each own epoch's pre-commit began, for the commit latency.
    pub started: std::sync::Mutex<HashMap<EpochKey, Instant>>,
}

impl EpochWorker {
    pub fn new(pipeline: Arc<Pipeline>, driver: Arc<Driver>) -> Self {
        Self { pipeline, driver, started: Default::default() }
    }
}

impl EpochWorker {
    /// Take work until the driver is gone or `stop` (which comes after the drain).
    pub async fn run(self, mut work: mpsc::UnboundedReceiver<Work>, stop: CancellationToken) {
        loop {
            let item = tokio::select! {
                () = stop.cancelled() => return,
                item = work.recv() => match item {
                    Some(item) => item,
                    None => return,
                },
            };
            self.handle(item, &stop).await;
        }
    }

    async fn handle(&self, work: Work, stop: &CancellationToken) {
        match work {
            Work::PreCommit(key) => {
                let started = Instant::now();
                self.started.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), started);
                if self.every_sink("pre_commit", &key, stop, |s, k| s.pre_commit(k)).await {
                    tracing::debug!(epoch = key.epoch, took = ?started.elapsed(), "epoch pre-committed");
                    self.driver.pre_committed(&key);
                }
            }
            Work::Commit(key) => {
                if commit_everywhere(&self.pipeline, &key, stop).await && self.is_own(&key) {
                    self.driver.sink_committed(&key);
                }
            }
            Work::Delete { key, ids } => {
                let due = self.pipeline.lock_ledger().commit(tag_of(&key), &ids);
                let id_of: HashMap<Ticket, String> = due.iter().map(|(t, _, id)| (*t, id.clone())).collect();
                let batch = due.into_iter().map(|(t, r, _)| (t, r)).collect();
                let sent_at = now_ms();
                let confirmed = self.pipeline.acker.delete_confirmed(batch).await;
                let confirmed: IdSet = if sent_at < self.driver.backend().lease_valid_until_ms() {
                    confirmed.iter().filter_map(|t| id_of.get(t).cloned()).collect()
                } else {
                    // Sent on a lease that had run out: the handles may be stale (SQS answers
                    // success without deleting), so the ids stay recorded; a redelivery is then
                    // recognised as committed and deleted by whoever receives it.
                    tracing::warn!(
                        epoch = key.epoch,
                        "deletes sent after the lease ran out are not counted as confirmed"
                    );
                    IdSet::new()
                };
                tracing::debug!(
                    epoch = key.epoch,
                    deleted = confirmed.len(),
                    recorded = ids.len(),
                    "epoch deleted"
                );
                let started = self.started.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                if let Some(started) = started {
                    self.pipeline.metrics.commit_latency(started.elapsed());
                }
                self.pipeline.metrics.epochs_committed.inc();
                self.driver.deleted(&key, &confirmed);
            }
            Work::Abort(key) => {
                self.started.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                let due = self.pipeline.lock_ledger().abort(tag_of(&key));
                tracing::info!(epoch = key.epoch, incarnation = %key.incarnation, released = due.len(),
                    "epoch aborted (this incarnation was fenced): releasing its messages");
                for (ticket, receipt) in due {
                    self.pipeline.acker.release(ticket, receipt);
                }
                for sink in sinks(&self.pipeline) {
                    for attempt in 1..=ABORT_ATTEMPTS {
                        match sink.abort(&key).await {
                            Ok(()) => break,
                            Err(e) => {
                                tracing::warn!(epoch = key.epoch, attempt, error = %e, "sink abort failed");
                                self.pipeline.metrics.error("checkpoint", "abort");
                            }
                        }
                    }
                }
            }
        }
    }

    fn is_own(&self, key: &EpochKey) -> bool {
        key.pod == self.driver.backend().pod() && key.incarnation == self.driver.incarnation()
    }

    /// Call `f` on every sink, each until it succeeds; `false` if `stop` came first or the key's
    /// incarnation is over (nothing will ever use the answer).
    async fn every_sink<F>(&self, what: &str, key: &EpochKey, stop: &CancellationToken, f: F) -> bool
    where
        F: for<'a> Fn(&'a dyn Sink, &'a EpochKey) -> futures::future::BoxFuture<'a, Result<(), SinkError>>,
    {
        for sink in sinks(&self.pipeline) {
            let mut delay = FIRST_RETRY_DELAY;
            loop {
                match f(sink.as_ref(), key).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(epoch = key.epoch, error = %e, "sink {what} failed; retrying");
                        self.pipeline.metrics.error("checkpoint", what.to_owned());
                    }
                }
                if key.incarnation != self.driver.incarnation() {
                    return false;
                }
                tokio::select! {
                    () = stop.cancelled() => return false,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            }
        }
        true
    }
}

/// Make `key`'s output visible in every sink, retrying each until it succeeds or `stop`.
/// Commit is idempotent in every sink, and may name another reader's (or an earlier
/// incarnation's) key: whoever finds a committed epoch finishes it.
pub async fn commit_everywhere(pipeline: &Pipeline, key: &EpochKey, stop: &CancellationToken) -> bool {
    for sink in sinks(pipeline) {
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            match sink.commit(key).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(pod = %key.pod, epoch = key.epoch, error = %e, "sink commit failed; retrying");
                    pipeline.metrics.error("checkpoint", "commit");
                }
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_RETRY_DELAY);
        }
    }
    true
}

/// Every sink that takes part in epochs: the routed sinks and the dead-letter sink.
fn sinks(pipeline: &Pipeline) -> Vec<Arc<dyn Sink>> {
    let sinks = pipeline.dispatcher.sinks();
    sinks
        .sinks
        .iter()
        .map(|s| s.sink.clone())
        .chain(sinks.dead_letter.iter().map(|d| d.sink().clone()))
        .collect()
}
