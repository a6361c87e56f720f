//! In-process epochs for exactly-once without a cluster (standalone mode).
//!
//! Why the same steps as the cross-pod protocol (DESIGN.md section 3), with one reader as the
//! whole barrier: the ledger and the sinks do not know who commits, so standalone exercises the
//! exact code the coordinated mode uses: open `E+1`, wait until `E` is settled, pre-commit the
//! sinks, then commit them and delete `E`'s receipts. An epoch whose pre-commit fails stays
//! pending and is tried again before any later one, so commits stay in order.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::pipeline::Pipeline;
use crate::sink::Sink;

const SETTLE_POLL: Duration = Duration::from_millis(20);
const COMMIT_ATTEMPTS: u32 = 3;

pub struct Checkpointer {
    pipeline: Arc<Pipeline>,
    pending: Vec<u64>,
}

impl Checkpointer {
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        Self { pipeline, pending: Vec::new() }
    }

    /// Close an epoch every `interval` until `stop`. A checkpoint under way when `stop` comes is
    /// finished (or left pending if the drain drops deliveries), never cut between steps.
    pub async fn run(mut self, interval: Duration, stop: CancellationToken) -> Self {
        loop {
            tokio::select! {
                () = stop.cancelled() => return self,
                () = tokio::time::sleep(interval) => {}
            }
            self.checkpoint().await;
        }
    }

    /// Close the open epoch and commit every pending epoch that can be, oldest first. Returns early
    /// (epochs left pending) when the drain deadline drops deliveries: their epochs cannot settle.
    pub async fn checkpoint(&mut self) {
        let closing = {
            let mut ledger = self.pipeline.lock_ledger();
            let closing = ledger.epoch();
            ledger.open_epoch();
            closing
        };
        self.pending.push(closing);
        while !self.pipeline.lock_ledger().epoch_settled(closing) {
            tokio::select! {
                () = self.pipeline.abort.cancelled() => return,
                () = tokio::time::sleep(SETTLE_POLL) => {}
            }
        }
        while let Some(&epoch) = self.pending.first() {
            if !self.commit(epoch).await {
                return;
            }
            self.pending.remove(0);
        }
    }

    async fn commit(&self, epoch: u64) -> bool {
        let sinks = self.sinks();
        for sink in &sinks {
            if let Err(e) = sink.pre_commit(epoch).await {
                tracing::warn!(epoch, error = %e, "pre-commit failed; the epoch stays open");
                self.pipeline.metrics.error("checkpoint", "pre_commit");
                return false;
            }
        }
        for sink in &sinks {
            // Commit is idempotent: try it a few times before leaving the output uncommitted.
            for attempt in 1..=COMMIT_ATTEMPTS {
                match sink.commit(epoch).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(epoch, attempt, error = %e, "sink commit failed");
                        self.pipeline.metrics.error("checkpoint", "commit");
                        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    }
                }
            }
        }
        let due = self.pipeline.lock_ledger().commit(epoch);
        tracing::debug!(epoch, deletes = due.len(), "epoch committed");
        for (ticket, receipt) in due {
            self.pipeline.acker.delete(ticket, receipt);
        }
        true
    }

    fn sinks(&self) -> Vec<Arc<dyn Sink>> {
        let sinks = self.pipeline.dispatcher.sinks();
        sinks
            .sinks
            .iter()
            .map(|s| s.sink.clone())
            .chain(sinks.dead_letter.iter().map(|d| d.sink().clone()))
            .collect()
    }
}
