//! The coordinator's I/O: for every exactlyOnce source, read the checkpoint and the leases, run
//! one `plan`, write the checkpoint with a compare-and-swap, and report status and fences.
//!
//! Why a polling loop rather than watches: a commit waits for the slowest reader anyway, and a
//! fixed short tick bounds commit latency (epoch close to deletion) by the tick plus the readers'
//! own watch delay, whatever happens to watch connections. One tick costs one list of leases and
//! one read of the checkpoint per source; writes happen only when something changed.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use sluice_crds::{Guarantee, SqsSource};
use sluice_protocol::coordinator::Action;
use sluice_protocol::{ROLE_LABEL, SOURCE_LABEL, checkpoint_configmap_name, now_ms};
use tokio_util::sync::CancellationToken;

use super::FIELD_MANAGER;
use super::body;
use super::metrics::{Metrics, SourceLabels};
use super::plan::{CheckpointStatus, plan, read_checkpoint};
use crate::source_cache::SourceCache;
use crate::source_ticks::{FailingSources, SourceTicks};

/// How often every source's checkpoint is stepped.
pub const TICK: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error("{}", crate::error::kube_line(.0))]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Plan(#[from] super::plan::PlanError),
    #[error("the SqsSource has no namespace or uid yet")]
    Incomplete,
}

/// What the loop remembers per source: the last status written and since when its condition
/// holds.
#[derive(Default)]
struct Reported {
    status: Option<CheckpointStatus>,
    since: String,
}

/// The coordinator task: registers its metrics into `registry` now, and returns the future that
/// steps every exactlyOnce source each [`TICK`] until `shutdown`.
pub fn run(
    client: Client,
    cache: SourceCache,
    registry: &mut Registry,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    coordinate(client, cache, Metrics::register(registry), shutdown)
}

async fn coordinate(client: Client, cache: SourceCache, metrics: Metrics, shutdown: CancellationToken) {
    let reporter =
        Reporter { controller: FIELD_MANAGER.to_owned(), instance: std::env::var("POD_NAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut ticks = SourceTicks::new(cache, TICK);
    let mut reported: HashMap<(String, String), Reported> = HashMap::new();
    let mut failing = FailingSources::default();
    while let Some(sources) = ticks.next(&shutdown).await {
        let mut seen = HashSet::new();
        for source in sources.iter().filter(|s| s.spec.delivery.guarantee == Guarantee::ExactlyOnce) {
            let key = (source.namespace().unwrap_or_default(), source.name_any());
            seen.insert(key.clone());
            let state = reported.entry(key.clone()).or_default();
            let result = tick(&client, &recorder, &metrics, source, state).await;
            failing.record(&key, result, "checkpoint step");
        }
        // Sources deleted or no longer exactlyOnce: no series, no memory of them.
        failing.retain(&seen);
        reported.retain(|key, _| {
            let kept = seen.contains(key);
            if !kept {
                metrics.forget(&SourceLabels { namespace: key.0.clone(), source: key.1.clone() });
            }
            kept
        });
    }
}

#[tracing::instrument(name = "checkpoint_step", skip_all, fields(
    source = %source.name_any(),
    namespace = %source.namespace().unwrap_or_default(),
))]
async fn tick(
    client: &Client,
    recorder: &Recorder,
    metrics: &Metrics,
    source: &SqsSource,
    reported: &mut Reported,
) -> Result<(), TickError> {
    let namespace = source.namespace().ok_or(TickError::Incomplete)?;
    let owner = source.controller_owner_ref(&()).ok_or(TickError::Incomplete)?;
    let name = source.name_any();
    let interval_ms = i64::from(source.spec.delivery.checkpoint_interval_seconds.unwrap_or(10).max(1)) * 1000;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);

    let leases = config_maps
        .list(&ListParams::default().labels(&format!("{SOURCE_LABEL}={name},{ROLE_LABEL}=lease")))
        .await?;
    // Leases first, then the checkpoint: the step must see a checkpoint at least as new as them.
    let current = config_maps.get_opt(&checkpoint_configmap_name(&name)).await?;
    let data = current.as_ref().and_then(|cm| cm.data.as_ref());
    let now = now_ms();
    let checkpoint = read_checkpoint(data, now)?;
    let existed = data.is_some_and(|d| d.contains_key("openEpoch"));
    let lease_data: Vec<_> = leases.items.iter().filter_map(|cm| cm.data.clone()).collect();
    if source.spec.suspend && !any_live(&lease_data, now) {
        // Suspended and every reader gone: no epoch to open or commit until the source resumes.
        return Ok(());
    }
    // The last barrier survives intervals without a commit, and an operator restart through the
    // status it wrote before.
    let last_barrier_ms = match &reported.status {
        Some(status) => status.last_barrier_ms,
        None => source.status.as_ref().and_then(|s| s.last_barrier_milliseconds),
    };
    let step = plan(&checkpoint, existed, &lease_data, interval_ms, now, last_barrier_ms);

    if let Some(next) = &step.write {
        let rv = current.as_ref().and_then(|cm| cm.resource_version());
        let body = body::checkpoint(&name, next, rv.as_deref(), &owner);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match config_maps.patch(&checkpoint_configmap_name(&name), &params, &Patch::Apply(&body)).await {
            Ok(_) => {}
            // Someone wrote in between: the next tick decides again from the new version.
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for action in &step.actions {
            announce(recorder, source, action).await;
        }
    }
    metrics.observe(&SourceLabels { namespace: namespace.clone(), source: name.clone() }, &step);

    if reported.status.as_ref() != Some(&step.status) {
        if reported.status.as_ref().is_none_or(|s| s.healthy != step.status.healthy) {
            reported.since = Timestamp::now().to_string();
        }
        let body = body::status(&step.status, &reported.since, source.meta().generation);
        let sources: Api<SqsSource> = Api::namespaced(client.clone(), &namespace);
        sources.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await?;
        reported.status = Some(step.status);
    }
    Ok(())
}

/// Whether any lease is still held: under `spec.suspend` the readers draining away still need
/// their open epoch committed (or aborted), as in a scale to zero.
fn any_live(leases: &[std::collections::BTreeMap<String, String>], now_ms: i64) -> bool {
    leases.iter().filter_map(|d| sluice_protocol::Lease::from_data(d).ok()).any(|l| !l.is_expired(now_ms, 0))
}

/// Fences and admissions are events (commits and openings are too frequent; they are in status).
async fn announce(recorder: &Recorder, source: &SqsSource, action: &Action) {
    let (type_, reason, note) = match action {
        Action::Fence { pod, incarnation, committed_through } => (
            EventType::Warning,
            "ReaderFenced",
            format!(
                "reader {pod} (incarnation {incarnation}) fenced: its lease ran out; epochs after {committed_through} of it are aborted"
            ),
        ),
        Action::Admit { pod, incarnation, admitted } => (
            EventType::Normal,
            "ReaderAdmitted",
            format!("reader {pod} (incarnation {incarnation}) takes part from epoch {admitted}"),
        ),
        _ => return,
    };
    tracing::info!(source = %source.name_any(), "{note}");
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Checkpoint".to_owned(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &source.object_ref(&())).await {
        tracing::warn!(%error, "cannot publish checkpoint event");
    }
}
