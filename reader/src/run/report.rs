//! Which readers report their sink health themselves: an at-least-once reader in a cluster.
//! Under exactlyOnce the lease renewals carry the report; standalone there is no operator.

use std::sync::Arc;

use sluice_crds::Guarantee;
use tokio::task::JoinHandle;

use super::{Coordination, Options};
use crate::config::settings::Settings;
use crate::process::stop::Stop;
use crate::settle::held_report::ReaderReport;

/// Starts the sink health reporter where one is needed; it ends with `stop`, once it has written
/// the reader's last report (the drain awaits the task it answers).
pub async fn sink_health(
    settings: &Settings,
    options: &Options,
    report: &Arc<ReaderReport>,
    stop: &Stop,
) -> Option<JoinHandle<()>> {
    if options.coordination != Coordination::Kubernetes || settings.guarantee != Guarantee::AtLeastOnce {
        return None;
    }
    #[cfg(feature = "cluster")]
    {
        let (source, pod, token) = (&settings.source_name, &options.reader_id, stop.token().clone());
        crate::cluster::report_sink_health(source, pod, report.clone(), token).await
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (report, stop);
        None
    }
}
