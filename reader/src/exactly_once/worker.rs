//! The pipeline's side of the checkpoint protocol (exactlyOnce): carries out the [`Work`] the
//! [`Driver`] hands out, through `settle`'s [`EpochSettle`] steps, and answers it.
//!
//! Why one worker, in order: an epoch's steps must happen in protocol order (pre-commit before the
//! ack, commit before the deletes), and a later epoch's commit must never overtake an earlier one;
//! one task taking the work in the order the driver issued it gives that without locks. Sink steps
//! are retried until done (by `settle`, on the sinks).
//!
//! The same worker serves both backends: standalone (in-process coordinator) and cluster
//! (ConfigMap leases); it never knows which.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_protocol::{EpochKey, IdSet};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Driver, Work};
use crate::process::metrics::Metrics;
use crate::settle::EpochSettle;

pub struct EpochWorker {
    settle: Arc<dyn EpochSettle>,
    driver: Arc<Driver>,
    metrics: Arc<Metrics>,
    /// When each own epoch's pre-commit began, for the commit latency.
    started: std::sync::Mutex<HashMap<EpochKey, Instant>>,
}

impl EpochWorker {
    pub fn new(settle: Arc<dyn EpochSettle>, driver: Arc<Driver>, metrics: Arc<Metrics>) -> Self {
        Self { settle, driver, metrics, started: Default::default() }
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
                if self.settle.pre_commit(&key, stop, &wanted).await {
                    tracing::debug!(epoch = key.epoch, took = ?started.elapsed(), "epoch pre-committed");
                    self.driver.pre_committed(&key);
                }
            }
            Work::Commit(key) => {
                let committed = self.settle.commit(&key, stop).await;
                if committed && self.is_own(&key) {
                    self.driver.sink_committed(&key);
                }
            }
            Work::Delete { key, ids } => self.delete(&key, &ids).await,
            Work::Abort(key) => {
                self.started.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                let released = self.settle.release(&key);
                tracing::info!(epoch = key.epoch, incarnation = %key.incarnation, released,
                    "epoch aborted (this incarnation was fenced): releasing its messages");
                self.settle.abort(&key).await;
            }
        }
    }

    /// The epoch is committed: delete its receipts, and answer the ids whose delete counts as
    /// confirmed.
    async fn delete(&self, key: &EpochKey, ids: &IdSet) {
        let deleted = self.settle.delete(key, ids).await;
        let confirmed: IdSet = if deleted.sent_at_ms < self.driver.backend().lease_valid_until_ms() {
            deleted.confirmed
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
            self.metrics.commit_latency(started.elapsed());
        }
        self.metrics.epochs_committed.inc();
        self.driver.deleted(key, &confirmed);
    }

    fn is_own(&self, key: &EpochKey) -> bool {
        key.pod == self.driver.backend().pod() && key.incarnation == self.driver.incarnation()
    }
}
