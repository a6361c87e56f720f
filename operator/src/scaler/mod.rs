//! The autoscaler: sizes each SqsSource's reader Deployment from its queues' depth and its readers'
//! measured drain rate.
//!
//! It runs beside the reconciler rather than inside it because it is driven by the queue, not by
//! Kubernetes objects changing: one loop per source polls the queue attributes, decides (pure, in
//! `decision`), and writes only `spec.replicas` under its own field manager, so reconcile and
//! autoscaler never fight over the same field. Run it on the leader only: two scalers would each
//! keep their own stabilization history.

pub mod apply;
pub mod attributes;
mod blind;
pub mod cadence;
pub mod children;
pub mod decision;
pub mod drain;
pub mod fallback;
pub mod flow;
pub mod history;
mod latency;
pub mod metrics;
pub mod reason;
pub mod suspend;
pub mod task;

#[cfg(test)]
mod burst_tests;

use crate::scope::Scope;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::registry::Registry;
use sluice_crds::SqsSource;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use attributes::{QueueAttributes, SqsQueueAttributes};
use children::Children;

use crate::own_writes::OwnWrites;
use crate::source_cache::SourceCache;
pub use decision::{Decision, Observation, backlog, decide};
pub use history::History;
pub use metrics::Metrics;
pub use reason::{Basis, LatencySizing, Reason};
use task::{Context, run_source};

use crate::access::ApiCall;
use crate::names::SCALER_FIELD_MANAGER;

/// Every API call the autoscaler makes (for the operator's ClusterRole; see `access`).
pub const API_CALLS: &[ApiCall] = &[
    // Watch the reader Deployments (see `children`), patch their spec.replicas.
    ApiCall::new("apps", "deployments", "list"),
    ApiCall::new("apps", "deployments", "watch"),
    ApiCall::new("apps", "deployments", "patch"),
    ApiCall::new("apps", "deployments", "create"),
    // Watch the lease ConfigMaps, apply the checkpoint ConfigMap's `replicas` key.
    ApiCall::new("", "configmaps", "list"),
    ApiCall::new("", "configmaps", "watch"),
    ApiCall::new("", "configmaps", "patch"),
    ApiCall::new("", "configmaps", "create"),
    ApiCall::new("sluice.dev", "sqssources/status", "patch"),
    // Read the source afresh when a patch of the Fallback condition made from the watched copy is refused.
    ApiCall::new("sluice.dev", "sqssources", "get"),
    ApiCall::new("events.k8s.io", "events", "create"),
    ApiCall::new("events.k8s.io", "events", "patch"),
];

/// What the autoscaler works from.
pub struct Inputs {
    pub client: Client,
    /// The namespaces whose reader Deployments and leases it watches.
    pub scope: Scope,
    /// The sources, shared with the operator's other background tasks.
    pub sources: SourceCache,
    /// Normally `SqsQueueAttributes::new(inspector)`, sharing the reconciler's SQS clients.
    pub queues: Arc<dyn QueueAttributes>,
    /// Bounds the intervals in progress together (`--scaler-intervals-at-once`).
    pub at_once: u16,
    pub own_writes: OwnWrites,
}

/// The autoscaler task: registers its metrics into `registry` now, and returns the future that
/// runs one scaling loop per source until `shutdown`.
pub fn run(
    inputs: Inputs,
    registry: &mut Registry,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let reporter =
        Reporter { controller: SCALER_FIELD_MANAGER.to_owned(), instance: std::env::var("POD_NAME").ok() };
    let metrics = Metrics::register(registry);
    let Inputs { client, scope, sources, queues, at_once, own_writes } = inputs;
    async move {
        let ctx = Context {
            recorder: Recorder::new(client.clone(), reporter),
            children: Children::watch(&client, &scope, &shutdown),
            client,
            queues,
            metrics,
            ticks: Arc::new(Semaphore::new(usize::from(at_once))),
            own_writes,
        };
        supervise(ctx, sources, shutdown).await;
    }
}

/// Starts a loop for each source in the cache once its first list is complete, and for each
/// source that appears later; a loop ends by itself when its source is deleted.
async fn supervise(ctx: Context, cache: SourceCache, shutdown: CancellationToken) {
    let loops_stop = shutdown.child_token();
    let mut loops: HashMap<ObjectRef<SqsSource>, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut changes = cache.changes();
    let ready = tokio::select! {
        () = shutdown.cancelled() => false,
        ready = cache.ready() => ready,
    };
    if !ready {
        return;
    }
    loop {
        changes.borrow_and_update();
        loops.retain(|_, handle| !handle.is_finished());
        for source in cache.all() {
            if let Entry::Vacant(slot) = loops.entry(ObjectRef::from_obj(source.as_ref())) {
                let key = slot.key().clone();
                tracing::info!(namespace = key.namespace.as_deref().unwrap_or_default(), source = %key.name, "starting scaling loop");
                let task = run_source(ctx.clone(), cache.clone(), key, loops_stop.child_token());
                slot.insert(tokio::spawn(task));
            }
        }
        // Several changes in a row wake this once; a change during the walk wakes it again.
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
        }
    }
    loops_stop.cancel();
    for (key, handle) in loops {
        if let Err(error) = handle.await {
            tracing::error!(namespace = key.namespace.as_deref().unwrap_or_default(), source = %key.name, %error, "scaling loop failed");
        }
    }
}
