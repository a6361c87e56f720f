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

use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use sluice_crds::SqsSource;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use attributes::{QueueAttributes, SqsQueueAttributes};
use children::Children;

use crate::own_writes::OwnWrites;
pub use decision::{Decision, Observation, backlog, decide};
pub use history::History;
pub use metrics::Metrics;
pub use reason::{Basis, LatencySizing, Reason};
use task::{Context, run_source};

use crate::access::ApiCall;
use crate::names::SCALER_FIELD_MANAGER;

/// Every API call the autoscaler makes (for the operator's ClusterRole; see `access`).
pub const API_CALLS: &[ApiCall] = &[
    // The reflector over all SqsSources.
    ApiCall::new("sluice.dev", "sqssources", "list"),
    ApiCall::new("sluice.dev", "sqssources", "watch"),
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
    // Read the source afresh before writing the Fallback condition into its conditions.
    ApiCall::new("sluice.dev", "sqssources", "get"),
    ApiCall::new("events.k8s.io", "events", "create"),
    ApiCall::new("events.k8s.io", "events", "patch"),
];

/// The autoscaler task: registers its metrics into `registry` now, and returns the future that
/// watches every SqsSource and runs one scaling loop per source until `shutdown`.
///
/// `queues` is normally `SqsQueueAttributes::new(inspector)`, sharing the reconciler's SQS clients;
/// `at_once` bounds the intervals in progress together (`--scaler-intervals-at-once`).
pub fn run(
    client: Client,
    scope: Scope,
    queues: Arc<dyn QueueAttributes>,
    at_once: u16,
    own_writes: OwnWrites,
    registry: &mut Registry,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let reporter =
        Reporter { controller: SCALER_FIELD_MANAGER.to_owned(), instance: std::env::var("POD_NAME").ok() };
    let metrics = Metrics::register(registry);
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
        supervise(ctx, scope, shutdown).await;
    }
}

/// Starts a loop for each source seen; a loop ends by itself when its source is deleted.
///
/// Loops start once the watch's list is complete: a loop reads its source from the store, which
/// kube-runtime fills only then (a loop started from the list's first events found no source and
/// ended, and the next event started it again).
async fn supervise(ctx: Context, scope: Scope, shutdown: CancellationToken) {
    let sources: Api<SqsSource> = scope.api(&ctx.client);
    let (store, writer) = reflector::store();
    let events = watcher(sources, watcher::Config::default())
        .default_backoff()
        .modify(crate::cache_watch::without_field_sets)
        .reflect(writer);
    let loops_stop = shutdown.child_token();
    let mut loops: HashMap<ObjectRef<SqsSource>, tokio::task::JoinHandle<()>> = HashMap::new();
    let on_event = |event: &watcher::Event<SqsSource>| {
        let seen: Vec<ObjectRef<SqsSource>> = match event {
            watcher::Event::InitDone => {
                store.state().iter().map(|s| ObjectRef::from_obj(s.as_ref())).collect()
            }
            watcher::Event::Apply(source) => vec![ObjectRef::from_obj(source)],
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::Delete(_) => return,
        };
        loops.retain(|_, handle| !handle.is_finished());
        for key in seen {
            if let Entry::Vacant(slot) = loops.entry(key) {
                let key = slot.key().clone();
                tracing::info!(namespace = key.namespace.as_deref().unwrap_or_default(), source = %key.name, "starting scaling loop");
                let task = run_source(ctx.clone(), store.clone(), key, loops_stop.child_token());
                slot.insert(tokio::spawn(task));
            }
        }
    };
    crate::cache_watch::follow(
        events,
        "scaler",
        "SqsSources",
        "no source is scaled",
        shutdown.clone(),
        on_event,
    )
    .await;
    loops_stop.cancel();
    for (key, handle) in loops {
        if let Err(error) = handle.await {
            tracing::error!(namespace = key.namespace.as_deref().unwrap_or_default(), source = %key.name, %error, "scaling loop failed");
        }
    }
}
