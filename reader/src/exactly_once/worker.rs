//! The pipeline's side of the checkpoint protocol (exactlyOnce): carries out the [`Work`] the
//! [`Driver`] hands out, on the sinks, the ledger and the acker, and answers it.
//!
//! Why one worker, in order: an epoch's steps must happen in protocol order (pre-commit before the
//! ack, commit before the deletes), and a later epoch's commit must never overtake an earlier one;
//! one task taking the work in the order the driver issued it gives that without locks. Sink steps
//! are retried until done (`Sinks::{pre_commit, commit, abort}`).
//!
//! The same worker serves both backends: standalone (in-process coordinator) and cluster
//! (ConfigMap leases); it never knows which.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_protocol::{EpochKey, IdSet, now_ms};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Driver, Work};
use crate::process::metrics::Metrics;
use crate::settle::Pipeline;
use crate::settle::ledger::{Tag, Ticket};
use crate::sink::{EpochStep, EpochSupport, SinkError, circuit};

/// The ledger tag of an epoch key.
pub fn tag_of(key: &EpochKey) -> Tag {
    Tag { incarnation: key.incarnation.0, epoch: key.epoch }
}

pub struct EpochWorker {
    pipeline: Arc<Pipeline>,
    driver: Arc<Driver>,
    /// When each own epoch's pre-commit began, for the commit latency.
    started: std::sync::Mutex<HashMap<EpochKey, Instant>>,
}

impl EpochWorker {
    pub fn new(pipeline: Arc<Pipeline>, driver: Arc<Driver>) -> Self {
        Self { pipeline, driver, started: Default::default() }
    }

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
                let wanted = || key.incarnation == self.driver.incarnation();
                let failed = sink_failed(self.pipeline.metrics(), &key);
                if self.pipeline.sinks().pre_commit(&key, stop, wanted, failed).await {
                    self.steps_succeeded();
                    tracing::debug!(epoch = key.epoch, took = ?started.elapsed(), "epoch pre-committed");
                    self.driver.pre_committed(&key);
                }
            }
            Work::Commit(key) => {
                let failed = sink_failed(self.pipeline.metrics(), &key);
                let committed = self.pipeline.sinks().commit(&key, stop, failed).await;
                if committed {
                    self.steps_succeeded();
                }
                if committed && self.is_own(&key) {
                    self.driver.sink_committed(&key);
                }
            }
            Work::Delete { key, ids } => self.delete(&key, &ids).await,
            Work::Abort(key) => {
                self.started.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                let due = self.pipeline.lock_ledger().abort(tag_of(&key));
                tracing::info!(epoch = key.epoch, incarnation = %key.incarnation, released = due.len(),
                    "epoch aborted (this incarnation was fenced): releasing its messages");
                for (ticket, receipt) in due {
                    self.pipeline.acker().release(ticket, receipt);
                }
                self.pipeline.sinks().abort(&key, sink_failed(self.pipeline.metrics(), &key)).await;
            }
        }
    }

    /// The epoch is committed: delete its receipts, and answer the ids whose delete counts as
    /// confirmed.
    async fn delete(&self, key: &EpochKey, ids: &IdSet) {
        let due = self.pipeline.lock_ledger().commit(tag_of(key), ids);
        let id_of: HashMap<Ticket, String> = due.iter().map(|(t, _, id)| (*t, id.clone())).collect();
        let batch = due.into_iter().map(|(t, r, _)| (t, r)).collect();
        let sent_at = now_ms();
        let confirmed = self.pipeline.acker().delete_confirmed(batch).await;
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
        tracing::debug!(epoch = key.epoch, deleted = confirmed.len(), recorded = ids.len(), "epoch deleted");
        let started = self.started.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        if let Some(started) = started {
            self.pipeline.metrics().commit_latency(started.elapsed());
        }
        self.pipeline.metrics().epochs_committed.inc();
        self.driver.deleted(key, &confirmed);
    }

    /// Every transactional sink took an epoch step: their circuits close (a pre-commit or commit
    /// that failed opened them, and paused receiving, while the epoch's messages stayed held).
    fn steps_succeeded(&self) {
        for sink in self.pipeline.sinks().every() {
            if sink.epoch_support() == EpochSupport::Transactional {
                circuit::succeeded(sink.name(), self.pipeline.metrics());
            }
        }
    }

    fn is_own(&self, key: &EpochKey) -> bool {
        key.pod == self.driver.backend().pod() && key.incarnation == self.driver.incarnation()
    }
}

/// What a failed sink step does: a WARN line, the `checkpoint` error counter, and a failure of
/// the sink's circuit (a pre-commit or commit that cannot be made is the sink's fault: receiving
/// pauses while the epoch's messages stay held and the step is retried). An abort's failure only
/// leaves staged output behind, so it does not count.
pub fn sink_failed<'a>(metrics: &'a Metrics, key: &'a EpochKey) -> impl Fn(EpochStep, &SinkError) + 'a {
    move |step, error| {
        tracing::warn!(pod = %key.pod, epoch = key.epoch, %error, "sink {} failed; retrying", step.name());
        metrics.error("checkpoint", step.name());
        if step != EpochStep::Abort {
            circuit::failed(&error.sink, &error.message, metrics);
        }
    }
}
