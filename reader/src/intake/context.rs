//! What every poller of a queue shares, written once: the queue and how to receive from it, the
//! limiter and the bound on what the reader holds, where a received batch goes, and the reader's
//! metrics and stop.
//!
//! Why one value: a queue's crew starts and retires pollers all through the run, and each one
//! needs the same handles; passing one `Arc<Intake>` keeps the crew and its pollers from listing
//! them twice.

use std::sync::Arc;

use sluice_crds::PayloadFormat;

use super::filtering::FilterStage;
use super::limiter::Limiter;
use crate::aws::queue::Queue;
use crate::config::settings::ReceiveSettings;
use crate::payload::Resolver;
use crate::payload::cleanup::ObjectCleanup;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;
use crate::settle::Pipeline;
use crate::settle::held::Held;

pub struct Intake {
    pub queue: Arc<Queue>,
    pub receive: ReceiveSettings,
    pub payload: PayloadFormat,
    pub limiter: Arc<Limiter>,
    /// What the reader holds (received, not yet settled), shared by every poller: no room for a
    /// batch means the sinks are the limit.
    pub held: Arc<Held>,
    /// Where a received batch is sorted, admitted, delivered and settled.
    pub pipeline: Arc<Pipeline>,
    /// Fetches the objects S3 notifications and Extended Client pointers name (absent: neither
    /// is resolved).
    pub resolver: Option<Arc<Resolver>>,
    /// Where a delivered message's Extended Client object is remembered, to be deleted with the
    /// message (absent: objects are kept).
    pub objects: Option<Arc<ObjectCleanup>>,
    /// `spec.filter`, compiled (absent: every message is taken).
    pub filter: Option<Arc<FilterStage>>,
    pub metrics: Arc<Metrics>,
    pub stop: Stop,
}
