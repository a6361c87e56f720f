//! Sinks: where records go, and how they say a record is safe.
//!
//! A sink answers one `Outcome` per record. Only `Delivered` lets the ledger
//! delete the receipt (at-least-once) or count it towards the epoch's ack (exactly-once).
//! `Rejected` is the record's fault (`fault::Fault::Record`, poison): the record goes to the
//! dead-letter sink, or with `failOnError` the reader stops. `Failed` is the sink's fault
//! (`fault::Fault::Sink`: its own retries ran out, or retrying now cannot help, as with a missing
//! bucket): the record is held in the reader, invisible, and delivered again when the sink's
//! circuit (`circuit`) lets it; never deleted, never dead-lettered, never handed back for it.
//! `Redeliver` (exactlyOnce, a record of an epoch the sink already sealed) releases it, and so does
//! `NotStarted` (the reader stops before the delivery began), at once.

use std::sync::Arc;

use futures::future::BoxFuture;
use sluice_protocol::EpochKey;

use crate::process::sink_stats::SinkStats;
use crate::record::Record;

mod aws_error;
#[cfg(test)]
mod aws_testing;
pub mod breaker;
pub mod build;
pub mod circuit;
pub mod cloudevents;
pub mod dead_letter;
mod epochs;
mod error;
pub mod events;
pub mod fault;
pub mod http;
pub mod http_batch;
pub mod http_batch_answer;
pub mod http_batch_event;
#[cfg(test)]
mod http_stream_tests;
#[cfg(test)]
mod http_tests;
pub mod log;
pub mod retry;
pub mod route;
pub mod s3;
mod s3_buffer;
mod s3_encode;
mod s3_layout;
mod s3_object;
#[cfg(test)]
mod s3_tests;
mod secret_file;
pub mod sqs;
pub mod sqs_attributes;
#[cfg(test)]
mod sqs_batch_tests;
mod sqs_offload;
#[cfg(test)]
mod sqs_tests;
#[cfg(test)]
pub(crate) mod testing;
mod url;

pub use build::{RoutedSink, SinkContext, Sinks, build, build_all};
pub use dead_letter::DeadLetter;
pub use epochs::EpochStep;
pub use error::{SinkBuildError, SinkError};

/// The final word of a sink on one record, after its own retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// The record's fault: retrying will not help (HTTP 4xx other than 408/429, a malformed
    /// record, an object gone, a body too large).
    Rejected {
        reason: String,
    },
    /// The sink's fault, after the sink's own retries (connect error, timeout, 5xx, 408, 429,
    /// throttling, a missing bucket or queue): the record is held and tried again.
    Failed {
        reason: String,
    },
    /// Neither's fault: the record must be received again to be delivered (exactlyOnce: it is
    /// tagged with an epoch the sink has already sealed, so only a redelivery, tagged anew, can
    /// go in). Released at once, never held, never counted against the sink.
    Redeliver {
        reason: String,
    },
    /// Neither's fault, and nothing was sent: the reader stops before the delivery started
    /// (`SinkContext::stopping`). Handed back at once, never counted against the sink (not in
    /// its failures, its health or its circuit).
    NotStarted,
}

/// How a sink takes part in the checkpoint protocol (`protocol/PROTOCOL.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochSupport {
    /// Output becomes visible only on `commit` (s3).
    Transactional,
    /// Redelivery is deduplicated downstream on the message id (sqs FIFO, http with ce-id).
    Idempotent,
    /// Cannot take part in exactly-once (log, sqs standard).
    None,
}

pub trait Sink: Send + Sync {
    /// The name from the spec, for metrics and logs.
    fn name(&self) -> &str;

    /// Deliver `records`; the answer has one outcome per record, in the same order.
    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>>;

    fn epoch_support(&self) -> EpochSupport {
        EpochSupport::None
    }

    /// `true` when the sink sends each record on its own (one request a record): the dispatcher
    /// then hands it records one by one, so each is settled as soon as its own delivery ends
    /// instead of waiting for the slowest record of its receive batch. Batching sinks keep
    /// `false` and get the batch (their requests carry many records).
    fn per_record(&self) -> bool {
        false
    }

    /// `true` when the sink reads a streamed record's object itself (`Record::object`, an object
    /// above `spec.payload.streamAboveBytes`). The dispatcher refuses such records to the others,
    /// which need the whole body in memory: they are rejected with the reason.
    fn streams_objects(&self) -> bool {
        false
    }

    /// Counters the sink keeps (retries, requests), for the reader's metrics; `None` for sinks
    /// that make no requests.
    fn stats(&self) -> Option<Arc<SinkStats>> {
        None
    }

    /// Make what was delivered under `key` (records with `key.incarnation`, `key.epoch`) durable,
    /// not yet visible. Called before the reader acks the epoch.
    fn pre_commit(&self, _key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async { Ok(()) })
    }

    /// `key` is committed: make its output visible. Must be idempotent, and must work for a key
    /// of another process (a reader finishing what a dead or fenced incarnation acked).
    fn commit(&self, _key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async { Ok(()) })
    }

    /// `key` will never commit (fenced): drop its output. Idempotent.
    fn abort(&self, _key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async { Ok(()) })
    }
}
