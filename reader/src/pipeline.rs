//! The pipeline's shared state, and the one place where verdicts become ledger transitions and
//! acker calls.
//!
//! Why settling lives here: the step from "the sink said Delivered" to "delete this receipt" must
//! happen without an await in between (a drain that drops a delivery task mid-way must find the
//! message either settled or still in work, never half way), and every poller uses the same rule.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_crds::PayloadFormat;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acker::Acker;
use crate::dispatch::{Dispatcher, Verdict};
use crate::error::Error;
use crate::ledger::{Ledger, Ticket};
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::stop::Stop;

pub struct Pipeline {
    pub dispatcher: Dispatcher,
    pub ledger: Arc<Mutex<Ledger>>,
    pub acker: Acker,
    pub limiter: Arc<Limiter>,
    pub metrics: Arc<Metrics>,
    pub payload: PayloadFormat,
    pub stop: Stop,
    /// Cancelled when the drain deadline passes: deliveries still running are dropped.
    pub abort: CancellationToken,
    /// Messages in work (received, not yet settled by the sinks) at most.
    pub capacity: Arc<Semaphore>,
    pub deliveries: TaskTracker,
}

impl Pipeline {
    pub fn lock_ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record received messages in the ledger; returns (ticket, epoch) for each.
    pub fn admit(
        &self,
        queue: usize,
        messages: &[(String, String)],
        visibility: Duration,
    ) -> Vec<(Ticket, u64)> {
        let now = Instant::now();
        let mut ledger = self.lock_ledger();
        let admitted: Vec<(Ticket, u64)> = messages
            .iter()
            .map(|(id, handle)| {
                let a = ledger.admit(queue, id, handle.clone(), now, visibility);
                if a.redelivered {
                    self.metrics.duplicates.inc();
                }
                (a.ticket, a.epoch)
            })
            .collect();
        self.metrics.in_flight.set(ledger.len() as i64);
        admitted
    }

    /// Apply one verdict per ticket.
    pub fn settle(&self, tickets: &[Ticket], verdicts: &[Verdict], message_ids: &[&str]) {
        let mut ledger = self.lock_ledger();
        for ((ticket, verdict), id) in tickets.iter().zip(verdicts).zip(message_ids) {
            match verdict {
                Verdict::Delete => {
                    if let Some(receipt) = ledger.acked(*ticket) {
                        self.acker.delete(*ticket, receipt);
                    }
                }
                Verdict::Release => {
                    if let Some(receipt) = ledger.release(*ticket) {
                        self.acker.release(*ticket, receipt);
                    }
                }
                Verdict::Stop { reason } => {
                    if let Some(receipt) = ledger.release(*ticket) {
                        self.acker.release(*ticket, receipt);
                    }
                    tracing::error!(message_id = id, %reason, "rejected with failOnError: stopping the reader");
                    self.stop
                        .fail(Error::FailOnError { message_id: (*id).to_owned(), reason: reason.clone() });
                }
            }
        }
    }

    /// Release these tickets (received while stopping, or dropped by the limiter wait).
    pub fn release(&self, tickets: &[Ticket]) {
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
