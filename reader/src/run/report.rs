//! Which readers report their sink health themselves: an at-least-once reader in a cluster.
//! Under exactlyOnce the lease renewals carry the report; standalone there is no operator.

use sluice_crds::Guarantee;

use super::{Coordination, Options};
use crate::config::settings::Settings;
use crate::process::stop::Stop;

/// Starts the sink health reporter where one is needed; it ends with `stop`.
pub async fn sink_health(settings: &Settings, options: &Options, stop: &Stop) {
    if options.coordination != Coordination::Kubernetes || settings.guarantee != Guarantee::AtLeastOnce {
        return;
    }
    #[cfg(feature = "cluster")]
    crate::cluster::report_sink_health(&settings.source_name, &options.reader_id, stop.token().clone()).await;
    #[cfg(not(feature = "cluster"))]
    let _ = stop;
}
