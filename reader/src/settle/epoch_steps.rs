//! The steps the checkpoint protocol asks of `settle`, behind one small trait.
//!
//! Why a trait: the epoch worker (`exactly_once`) must order an epoch's steps (pre-commit before
//! the ack, commit before the deletes) but must not know the ledger, the acker or the sinks. It
//! asks for a step on an [`EpochKey`] and gets an answer back; `settle` carries each step out.

use futures::future::BoxFuture;
use sluice_protocol::{EpochKey, IdSet, now_ms};
use tokio_util::sync::CancellationToken;

use super::events::EpochStepFailed;
use super::ledger::Tag;
use super::pipeline::Pipeline;
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::sink::circuit::Circuits;
use crate::sink::{EpochStep, EpochSupport, SinkError};

/// What a committed epoch's deletes came to.
pub struct Deleted {
    /// When the deletes were sent (ms since the Unix epoch): a delete counts as confirmed only
    /// if it was sent while the lease was valid.
    pub sent_at_ms: i64,
    /// The ids whose delete SQS confirmed.
    pub confirmed: IdSet,
}

/// An epoch's steps on the sinks and the receipts. Sink steps are retried until done.
pub trait EpochSettle: Send + Sync {
    /// Pre-commit every sink for `key` (durable, not visible). `false` if `stop` came first or
    /// `wanted` said, after a failure, that the step is no longer wanted.
    fn pre_commit<'a>(
        &'a self,
        key: &'a EpochKey,
        stop: &'a CancellationToken,
        wanted: &'a (dyn Fn() -> bool + Send + Sync),
    ) -> BoxFuture<'a, bool>;
    /// Make the output of `key` visible in every sink (idempotent). `false` if `stop` came first.
    fn commit<'a>(&'a self, key: &'a EpochKey, stop: &'a CancellationToken) -> BoxFuture<'a, bool>;
    /// Abort `key` in every sink (its staged output is dropped).
    fn abort<'a>(&'a self, key: &'a EpochKey) -> BoxFuture<'a, ()>;
    /// Delete the receipts of `ids` tagged with `key` (DeleteMessageBatch).
    fn delete<'a>(&'a self, key: &'a EpochKey, ids: &'a IdSet) -> BoxFuture<'a, Deleted>;
    /// Release every receipt tagged with `key` that is not settled yet (visibility 0); answers
    /// how many.
    fn release(&self, key: &EpochKey) -> usize;
}

/// The ledger tag of an epoch key.
fn tag_of(key: &EpochKey) -> Tag {
    Tag { incarnation: key.incarnation.0, epoch: key.epoch }
}

impl EpochSettle for Pipeline {
    fn pre_commit<'a>(
        &'a self,
        key: &'a EpochKey,
        stop: &'a CancellationToken,
        wanted: &'a (dyn Fn() -> bool + Send + Sync),
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let done = self
                .dispatcher
                .sinks()
                .pre_commit(
                    key,
                    stop,
                    wanted,
                    sink_failed(&self.metrics, &self.dispatcher.sinks().circuits, key),
                )
                .await;
            if done {
                self.steps_succeeded();
            }
            done
        })
    }

    fn commit<'a>(&'a self, key: &'a EpochKey, stop: &'a CancellationToken) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let done = self
                .dispatcher
                .sinks()
                .commit(key, stop, sink_failed(&self.metrics, &self.dispatcher.sinks().circuits, key))
                .await;
            if done {
                self.steps_succeeded();
            }
            done
        })
    }

    fn abort<'a>(&'a self, key: &'a EpochKey) -> BoxFuture<'a, ()> {
        Box::pin(
            self.dispatcher
                .sinks()
                .abort(key, sink_failed(&self.metrics, &self.dispatcher.sinks().circuits, key)),
        )
    }

    fn delete<'a>(&'a self, key: &'a EpochKey, ids: &'a IdSet) -> BoxFuture<'a, Deleted> {
        Box::pin(async move {
            let due = self.lock_ledger().commit(tag_of(key), ids);
            let id_of: std::collections::HashMap<_, _> =
                due.iter().map(|(t, _, id)| (*t, id.clone())).collect();
            let batch = due.into_iter().map(|(t, r, _)| (t, r)).collect();
            let sent_at_ms = now_ms();
            let confirmed = self.acker.delete_confirmed(batch).await;
            let confirmed = confirmed.iter().filter_map(|t| id_of.get(t).cloned()).collect();
            Deleted { sent_at_ms, confirmed }
        })
    }

    fn release(&self, key: &EpochKey) -> usize {
        let due = self.lock_ledger().abort(tag_of(key));
        let released = due.len();
        for (ticket, receipt) in due {
            self.acker.release(ticket, receipt);
        }
        released
    }
}

impl Pipeline {
    /// Every transactional sink took an epoch step: their circuits close (a pre-commit or commit
    /// that failed opened them, and paused receiving, while the epoch's messages stayed held).
    fn steps_succeeded(&self) {
        let sinks = self.dispatcher.sinks();
        for sink in sinks.every() {
            if sink.epoch_support() == EpochSupport::Transactional {
                sinks.circuits.succeeded(sink.name(), &self.metrics);
            }
        }
    }
}

/// What a failed sink step does (`events::EpochStepFailed`): counted, a WARN line, and a failure
/// of the sink's circuit (not for an abort).
pub fn sink_failed<'a>(
    metrics: &'a Metrics,
    circuits: &'a Circuits,
    key: &'a EpochKey,
) -> impl Fn(EpochStep, &SinkError) + 'a {
    move |step, error| EpochStepFailed { key, step, error, circuits }.emit(metrics)
}
