//! The reader's way into the cluster: one API client set-up, the lease backend for exactlyOnce,
//! and the rate-share follower.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::health_report::Reporter;
use super::lease::{Cluster, ClusterConfig};
use super::share;
use crate::config::settings::RateSettings;
use crate::exactly_once::{Backend, Entries};
use crate::intake::limiter::Limiter;
use crate::process::error::{Error, Result};
use crate::process::metrics::Metrics;
use crate::settle::held_report::ReaderReport;

/// How long a call to the Kubernetes API may wait for its answer. The reader makes only short
/// calls (a GET or a replace of one ConfigMap, a list of its source's leases), and an API server
/// whose etcd is away holds them without an answer: without a limit a lease renewal would wait
/// past the lease itself and the fault would show nowhere (see docs/control-plane-faults.md).
const API_TIMEOUT: Duration = Duration::from_secs(8);

/// The in-cluster (or kubeconfig) client, and the namespace: `POD_NAMESPACE`, else the client's.
async fn client() -> Result<(kube::Client, String), kube::Error> {
    let mut config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    config.read_timeout = Some(API_TIMEOUT);
    // The limit counts from the request, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    let client = kube::Client::try_from(config)?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned());
    Ok((client, namespace))
}

/// Take this pod's lease for the source (waiting until a previous incarnation is fenced), then
/// renew it and follow the operator's checkpoint until `stop`. Answers the backend and the
/// committed entries carried over.
pub async fn join(
    source: &str,
    pod: &str,
    lease_duration: Duration,
    report: Arc<ReaderReport>,
    stop: CancellationToken,
) -> Result<(Arc<dyn Backend>, Entries)> {
    let (client, namespace) =
        client().await.map_err(|e| Error::Other(format!("cannot reach the Kubernetes API: {e}")))?;
    let config = ClusterConfig {
        namespace,
        source: source.to_owned(),
        source_uid: std::env::var("SLUICE_SOURCE_UID").unwrap_or_default(),
        pod: pod.to_owned(),
        lease_duration,
        report,
    };
    tracing::info!(lease = ?config.lease_duration, "joining the checkpoint protocol");
    let (cluster, inherited) = Cluster::join(client, config, stop)
        .await
        .map_err(|e| Error::Other(format!("cannot take the reader lease: {e}")))?;
    Ok((cluster, inherited))
}

/// Follow this replica's share of the source-wide rate limit (see `share`), when the source has
/// one: source name from `SLUICE_SOURCE`, else `default_source`. The first read is made before
/// this returns, so the pollers start with the share rather than a burst of the full limit.
/// `None` when there is nothing to follow; without an API client the reader keeps the full
/// limit, and says so.
pub async fn start_share(
    limiter: Arc<Limiter>,
    total: RateSettings,
    default_source: &str,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    if !share::is_limited(&total) {
        return None;
    }
    let (client, namespace) = match client().await {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%error, "no Kubernetes client: applying the full source-wide rate limit");
            return None;
        }
    };
    let source = std::env::var("SLUICE_SOURCE").ok().filter(|v| !v.is_empty());
    let source = source.unwrap_or_else(|| default_source.to_owned());
    let follower = share::Follower::new(client, &namespace, &source, limiter, total, metrics);
    share::start(follower, stop).await
}

/// Report this reader's sink health in its lease ConfigMap until `stop` (see `health_report`); for
/// readers that hold no protocol lease (atLeastOnce). The task ends once the last report (the
/// reader draining) is written or given up: the drain awaits it. Without an API client it says
/// so and reports nothing (`None`).
pub async fn report_sink_health(
    source: &str,
    pod: &str,
    report: Arc<ReaderReport>,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    let (client, namespace) = match client().await {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%error, "no Kubernetes client: sink health is not reported to the operator");
            return None;
        }
    };
    let config = ClusterConfig {
        namespace: namespace.clone(),
        source: std::env::var("SLUICE_SOURCE")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| source.to_owned()),
        source_uid: std::env::var("SLUICE_SOURCE_UID").unwrap_or_default(),
        pod: pod.to_owned(),
        // No protocol lease is held: the duration is not written.
        lease_duration: Duration::ZERO,
        report,
    };
    let reporter = Reporter { config_maps: kube::Api::namespaced(client, &namespace), config };
    Some(tokio::spawn(reporter.run(stop)))
}
