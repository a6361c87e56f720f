//! The pipeline's shared state, and the one place where verdicts become ledger transitions and
//! acker calls.
//!
//! Why settling lives here: the step from "the sink said Delivered" to "delete this receipt" must
//! happen without an await in between (a drain that drops a delivery task mid-way must find the
//! message either settled or still in work, never half way), and every poller uses the same rule.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_crds::PayloadFormat;
use sluice_crds::checkpoint::Incarnation;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acker::Acker;
use crate::coordination::Driver;
use crate::dispatch::{Dispatcher, Item, Verdict};
use crate::error::Error;
use crate::ledger::{Ledger, Tag, Ticket};
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
    /// The checkpoint protocol (exactlyOnce); `None` under atLeastOnce, where there are no epochs.
    pub epochs: Option<Arc<Driver>>,
}

/// One received message to admit: id, receipt handle, and its tag.
pub struct Arrival {
    pub message_id: String,
    pub handle: String,
    pub tag: Tag,
}

impl Pipeline {
    pub fn lock_ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Apply one verdict per ticket, then tell the checkpoint protocol which tagged messages are
    /// settled (after the ledger, so an epoch can only close on messages the ledger holds).
    pub fn settle(&self, tickets: &[Ticket], verdicts: &[Verdict], items: &[Item]) {
        {
            let mut ledger = self.lock_ledger();
            for ((ticket, verdict), item) in tickets.iter().zip(verdicts).zip(items) {
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
                        let id = &item.record.message_id;
                        tracing::error!(message_id = %id, %reason, "rejected with failOnError: stopping the reader");
                        self.stop.fail(Error::FailOnError { message_id: id.clone(), reason: reason.clone() });
                    }
                }
            }
        }
        if let Some(driver) = &self.epochs {
            for (verdict, item) in verdicts.iter().zip(items) {
                let r = &item.record;
                if r.epoch != 0 {
                    driver.settled(
                        Incarnation(r.incarnation),
                        r.epoch,
                        &r.message_id,
                        *verdict == Verdict::Delete,
                    );
                }
            }
        }
    }

    /// Release these tickets (received while stopping, dropped by the limiter wait, a panicking
    /// sink); tagged ones are settled as not delivered.
    pub fn release(&self, tickets: &[Ticket], items: &[Item]) {
        self.release_tickets(tickets);
        if let Some(driver) = &self.epochs {
            for item in items {
                let r = &item.record;
                if r.epoch != 0 {
                    driver.settled(Incarnation(r.incarnation), r.epoch, &r.message_id, false);
                }
            }
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
