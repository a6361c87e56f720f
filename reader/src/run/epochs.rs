//! Joining the checkpoint protocol under exactlyOnce: which backend, and the gate it gives.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::{Coordination, Options};
use crate::aws::queue::Queue;
use crate::config::settings::Settings;
use crate::exactly_once::standalone::Standalone;
use crate::exactly_once::{Backend, Driver, Entries, Work};
#[cfg(not(feature = "cluster"))]
use crate::process::error::Error;
use crate::process::error::Result;
use crate::settle::held_report::ReaderReport;

/// Bounds of a reader lease. It must stay below half the visibility timeout (the heartbeat
/// extends at half), and short enough that a dead reader is fenced quickly.
const MIN_LEASE: Duration = Duration::from_secs(2);
const MAX_LEASE: Duration = Duration::from_secs(15);
/// The checkpoint interval when the spec sets none (standalone runs).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// The lease duration for these queues: a third of the shortest visibility timeout, within
/// bounds. A renewal needs every held message invisible for a whole lease, and the heartbeat keeps
/// them invisible for at least half the timeout, so a third leaves a sixth as margin.
pub fn lease_duration(queues: &[Arc<Queue>]) -> Duration {
    let shortest = queues.iter().map(|q| q.visibility).min().unwrap_or(MAX_LEASE * 3);
    (shortest / 3).clamp(MIN_LEASE, MAX_LEASE)
}

/// Start the checkpoint protocol: the in-process coordinator standalone, the own lease and the
/// operator's checkpoint ConfigMap under Kubernetes.
pub async fn join(
    settings: &Settings,
    options: &Options,
    queues: &[Arc<Queue>],
    report: &Arc<ReaderReport>,
    stop: CancellationToken,
) -> Result<(Arc<Driver>, UnboundedReceiver<Work>)> {
    let interval = settings.checkpoint_interval.unwrap_or(DEFAULT_INTERVAL);
    let (backend, inherited): (Arc<dyn Backend>, Entries) = match options.coordination {
        Coordination::Standalone => {
            (Standalone::start(&options.reader_id, interval, stop.clone()), Entries::new())
        }
        Coordination::Kubernetes => in_cluster(settings, options, queues, report, stop.clone()).await?,
    };
    Ok(Driver::start(backend, &inherited, stop))
}

/// The lease backend; without the `cluster` feature, a configuration error.
async fn in_cluster(
    settings: &Settings,
    options: &Options,
    queues: &[Arc<Queue>],
    report: &Arc<ReaderReport>,
    stop: CancellationToken,
) -> Result<(Arc<dyn Backend>, Entries)> {
    #[cfg(feature = "cluster")]
    return crate::cluster::join(
        &settings.source_name,
        &options.reader_id,
        lease_duration(queues),
        report.clone(),
        stop,
    )
    .await;
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (settings, options, queues, report, stop);
        Err(not_built_for_clusters())
    }
}

/// `--coordination kubernetes` on a reader built without the `cluster` feature.
#[cfg(not(feature = "cluster"))]
pub fn not_built_for_clusters() -> Error {
    Error::config(
        "--coordination",
        "kubernetes: this reader was built without the cluster feature: use --coordination standalone or a reader built with default features",
    )
}
