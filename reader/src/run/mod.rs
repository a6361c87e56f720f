//! The reader from start to exit: settings, sinks, queues, pipeline, drain.
//!
//! Why this order: everything that can be wrong in the spec (fields, sink URLs, queues that do
//! not answer) is found before the first ReceiveMessage, so a bad configuration exits 2 having
//! touched nothing. The drain runs the same steps whatever stopped the reader: stop receiving,
//! let deliveries finish until the deadline, release what is left, flush deletes and releases.
//!
//! The only module that names every layer: it picks the gate (open, or the checkpoint protocol
//! over the in-process or the cluster backend) and hands it to the stages.

mod drain;
mod epochs;
mod pollers;
mod report;
mod start;
mod targets;

use std::sync::Arc;

use sluice_crds::SqsSource;
use tokio_util::sync::CancellationToken;

pub use crate::config::options::{Coordination, Options};
use crate::config::settings::Settings;
use crate::process::admin::Admin;
use crate::process::error::Result;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;

pub use epochs::lease_duration;

/// Run until `stop`; `Ok` after a clean drain.
pub async fn run(source: SqsSource, options: Options, stop: Stop) -> Result<()> {
    let settings = Settings::from_source(&source)?;
    let metrics = Arc::new(Metrics::new());
    metrics.watch_otlp_export();
    let admin = Admin::new(metrics.clone());
    let (_, serving) = admin.bind(&options.admin_addr, options.admin_addr_file.as_deref()).await?;
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(serving.run(admin_stop.clone()));

    let result = match start::start(&settings, &options, &stop, &admin, metrics).await {
        Ok(Some(running)) => {
            stop.stopped().await;
            admin.set_ready(false);
            drain::drain(running, &options, &stop).await;
            stop.take_failure().map_or(Ok(()), Err)
        }
        // Stopped while starting.
        Ok(None) => stop.take_failure().map_or(Ok(()), Err),
        Err(error) => Err(error),
    };
    admin_stop.cancel();
    let _ = admin_task.await;
    result
}
