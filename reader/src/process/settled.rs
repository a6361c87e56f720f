//! What the acker tells whoever keeps something for a received message until SQS is done with it
//! (the payload stage's Extended Client objects, `payload::cleanup`).
//!
//! Why a trait down here: the acker (`settle`) is the only place that knows a delete was
//! confirmed, and the payload stage owns the objects; naming each other, the two stages would
//! import each other. This seam sits below both: `settle` calls it, `payload` implements it, and
//! `run` hands the one to the other.

use futures::future::BoxFuture;

/// Told, by the id `settle` gives each received message (a redelivery gets a new one), which
/// messages SQS confirmed deleted and which come back to the queue.
pub trait Settled: Send + Sync {
    /// SQS confirmed these messages deleted.
    fn deleted(&self, tickets: &[u64]);
    /// These messages were released, or their delete given up: they come back.
    fn returned(&self, tickets: &[u64]);
    /// The acker closes: finish (briefly) what is under way; nothing more comes.
    fn close(&self) -> BoxFuture<'_, ()>;
}
