//! The reader's side of the checkpoint protocol (`protocol/PROTOCOL.md`):
//! the gate the stages ask, the driver that runs the pure `ReaderEpochs` state machine against a
//! backend, and the worker that carries out the protocol's work on the sinks and the ledger.
//!
//! Why a layer of its own: the stages (intake, deliver, sink, settle) must not know whether
//! there is a checkpoint protocol at all, nor whether epochs are coordinated by an operator
//! through ConfigMaps or in-process. They ask a `settle::Gate`; [`EpochGate`] answers for
//! exactlyOnce. Lease writes, fencing and rejoining happen here, behind a [`Backend`]:
//! [`standalone::Standalone`] runs the operator's coordinator step in-process (one reader is the
//! whole barrier); the cluster's lease ConfigMaps (`cluster::lease`) are the other backend.

pub mod driver;
mod events;
mod gate;
mod observed;
mod redelivery;
pub mod standalone;
mod worker;

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use sluice_protocol::{DataError, Epoch, EpochKey, IdSet, Incarnation, Redelivery};

pub use driver::Driver;
pub use gate::EpochGate;
pub use observed::Observed;
pub use worker::EpochWorker;

/// What the pipeline must do for the protocol. Each has an answer on the [`Driver`]. Every item
/// names its [`EpochKey`] (pod, incarnation, epoch): after a fence and rejoin the same epoch number
/// may come back under a new incarnation, and an answer for the old one must not count for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Every message of the epoch is settled: pre-commit every sink for it (durable, not
    /// visible), then [`Driver::pre_committed`].
    PreCommit(EpochKey),
    /// Make the output of `key` visible in every sink (idempotent). For an own epoch then
    /// [`Driver::sink_committed`]; a key of an earlier incarnation (inherited) needs no answer.
    Commit(EpochKey),
    /// Delete the receipts of the epoch's ids (DeleteMessageBatch), then [`Driver::deleted`] with
    /// the ids whose delete succeeded.
    Delete { key: EpochKey, ids: IdSet },
    /// The epoch never commits here: abort it in every sink and release its receipts
    /// (ChangeMessageVisibility 0). No answer.
    Abort(EpochKey),
}

#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    #[error("the lease was written by someone else (compare-and-swap conflict)")]
    Conflict,
    /// The backend's store (the Kubernetes API) failed; the text says which call and why.
    #[error("kubernetes api: {0}")]
    Api(String),
    #[error("lease or checkpoint data: {0}")]
    Data(#[from] DataError),
    #[error("coordination stopped")]
    Closed,
}

pub type Result<T, E = CoordinationError> = std::result::Result<T, E>;

/// Id entries of a lease by (incarnation, epoch): what a rejoin carries over.
pub type Entries = BTreeMap<(Incarnation, Epoch), IdSet>;

/// Where the checkpoint and the own lease live.
pub trait Backend: Send + Sync + 'static {
    /// The pod name (member name).
    fn pod(&self) -> &str;
    /// The incarnation whose lease is current.
    fn incarnation(&self) -> Incarnation;
    /// The checkpoint versions and the lease loss this backend observed.
    fn observed(&self) -> &Observed;
    /// One compare-and-swap: `ackedEpoch = through` and an id entry per listed epoch, for
    /// `incarnation`; a [`CoordinationError::Conflict`] if the lease now belongs to another one (a
    /// late ack of an incarnation that is over must never land in its successor's lease).
    fn write_ack(
        &self,
        incarnation: Incarnation,
        through: Epoch,
        entries: Vec<(Epoch, IdSet)>,
    ) -> BoxFuture<'_, Result<()>>;
    /// Remove the id entry `(incarnation, epoch)`.
    fn forget(&self, incarnation: Incarnation, epoch: Epoch) -> BoxFuture<'_, Result<()>>;
    /// Take the lease over with a new incarnation once the old one is fenced; answers the new
    /// incarnation and the committed entries carried over.
    fn rejoin(&self) -> BoxFuture<'_, Result<(Incarnation, Entries)>>;
    /// What to do with a received message (see `sluice_protocol::classify`).
    fn classify(&self, id: &str, receive_count: u32) -> BoxFuture<'_, Result<Redelivery>>;
    /// [`Backend::classify`] for a received batch of `(id, receive count)`, one answer each in order.
    /// Backends that read the API override it to read the leases once per batch.
    fn classify_many(&self, items: Vec<(String, u32)>) -> BoxFuture<'_, Result<Vec<Redelivery>>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(items.len());
            for (id, count) in items {
                answers.push(self.classify(&id, count).await?);
            }
            Ok(answers)
        })
    }
    /// Every held receipt is invisible to others until at least this time (ms since the Unix
    /// epoch); a renewal never makes the lease outlast it.
    fn visibility_covered_until(&self, until_ms: i64);
    /// A clean exit with nothing left to do: let the own lease run out now, so the coordinator
    /// fences this member at its next step instead of waiting a whole lease duration (its
    /// barrier would wait that long). Call only when `Driver::drained`.
    fn leave(&self) -> BoxFuture<'_, Result<()>>;
    /// Until when (ms since the Unix epoch, own clock) the own lease is valid; `i64::MIN` once it is
    /// lost. A delete counts as confirmed only if it was sent before this: only then was the
    /// receipt handle current (SQS answers success for a stale handle without deleting).
    fn lease_valid_until_ms(&self) -> i64;
    /// Figures published in the lease for the autoscaler.
    fn report(&self, drain_millis_per_second: u64, in_flight: u64, draining: bool);
}
