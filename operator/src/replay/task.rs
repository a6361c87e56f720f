//! The replay follower: every [`TICK`], for each source, starts the job of its `spec.replay`
//! unless `status.replay` says that request is finished, and stops a job whose request was
//! withdrawn or replaced, or whose source is being deleted.
//!
//! Why one task per request rather than a step per tick: a request moves messages for minutes at
//! its own pace; the tick only decides which jobs run. A job that ends early (a fault finding the
//! queues) is started again at the next tick, from the status it left.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter as EventReporter};
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::job;
use super::plan::RUNNING;
use super::report::{ReplayMetrics, Reporter, SourceLabels};
use crate::access::ApiCall;
use crate::identity::Identities;
use crate::names::FIELD_MANAGER;
use crate::source_cache::SourceCache;
use crate::source_ticks::SourceTicks;

/// How often the follower looks for new or withdrawn requests.
pub const TICK: Duration = Duration::from_secs(2);

/// The patch of `status.replay` (the sources come from the operator's `SourceCache`); events
/// through the Recorder.
pub const API_CALLS: &[ApiCall] = &[ApiCall::new("sluice.dev", "sqssources/status", "patch")];

struct Running {
    id: String,
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

/// The task: runs the sources' replay requests until `shutdown`.
pub fn run(
    client: Client,
    cache: SourceCache,
    identities: Identities,
    registry: &mut Registry,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let metrics = ReplayMetrics::register(registry);
    follow(client, cache, identities, metrics, shutdown)
}

async fn follow(
    client: Client,
    cache: SourceCache,
    identities: Identities,
    metrics: ReplayMetrics,
    shutdown: CancellationToken,
) {
    let reporter =
        EventReporter { controller: FIELD_MANAGER.to_owned(), instance: std::env::var("POD_NAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut ticks = SourceTicks::new(cache, TICK);
    let mut jobs: HashMap<(String, String), Running> = HashMap::new();
    while let Some(sources) = ticks.next(&shutdown).await {
        let mut wanted = HashMap::new();
        for source in sources.iter().filter(|s| s.meta().deletion_timestamp.is_none()) {
            let key = (source.namespace().unwrap_or_default(), source.name_any());
            metrics.touch(&SourceLabels { namespace: key.0.clone(), source: key.1.clone() });
            let Some(spec) = source.spec.replay.clone() else { continue };
            wanted.insert(key.clone(), spec.id.clone());
            if jobs.get(&key).is_some_and(|r| r.id == spec.id && !r.handle.is_finished()) {
                continue;
            }
            let finished = source
                .status
                .as_ref()
                .and_then(|s| s.replay.as_ref())
                .is_some_and(|r| r.id == spec.id && r.phase != RUNNING);
            if finished {
                continue;
            }
            if let Some(old) = jobs.remove(&key) {
                old.stop.cancel();
            }
            let report = Reporter {
                api: Api::namespaced(client.clone(), &key.0),
                source: source.as_ref().clone(),
                recorder: recorder.clone(),
                metrics: metrics.clone(),
            };
            let stop = shutdown.child_token();
            let handle = tokio::spawn(job::run(report, identities.clone(), spec.clone(), stop.clone()));
            jobs.insert(key, Running { id: spec.id, stop, handle });
        }
        jobs.retain(|key, running| {
            let keep = wanted.get(key) == Some(&running.id);
            if !keep {
                running.stop.cancel();
            }
            keep
        });
    }
    for running in jobs.into_values() {
        running.stop.cancel();
        let _ = running.handle.await;
    }
}
