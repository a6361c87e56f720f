//! Keeps a watch-fed cache in step, saying when its watch fails and when it works again.
//!
//! Why one helper: every cache of the operator's background tasks (the SqsSources the follower
//! tasks walk and the autoscaler starts its loops from, the reader Deployments and leases the
//! autoscaler reads) is filled by a watch with
//! backoff, and while a watch fails its cache keeps what it last saw. A person needs one WARN line
//! when that starts (naming what goes stale) and one INFO line when it ends, not one per retry,
//! and an alert needs a gauge that holds while it lasts (`sluice_operator_watch_failing`).

use std::pin::pin;
use std::sync::OnceLock;
use std::time::Instant;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// The watch metrics, registered once by the operator's start; unregistered (in unit tests) the
/// figures go nowhere. Global because every task's caches report to them and none owns them.
static METRICS: OnceLock<WatchMetrics> = OnceLock::new();

#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    failing: Family<WatchLabels, Gauge>,
    failures: Family<WatchLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    task: String,
    objects: String,
}

impl WatchMetrics {
    /// Registers the watch metrics for every cache the process follows.
    pub fn register(registry: &mut Registry) {
        let metrics = METRICS.get_or_init(Self::default);
        let registry = registry.sub_registry_with_prefix("sluice_operator");
        registry.register(
            "watch_failing",
            "1 while the watch that fills one of the operator's caches fails (the cache keeps what it last saw and goes stale), else 0",
            metrics.failing.clone(),
        );
        registry.register(
            "watch_failures",
            "Times a watch that fills one of the operator's caches began to fail (one per outage, not per retry)",
            metrics.failures.clone(),
        );
    }
}

/// Drives `events` (a watch already reflected into its store) until it ends or `stop`, handing
/// each event to `on_event`. `task` names the task in the log lines, `what` the objects watched,
/// `stale` what goes stale while it fails.
pub async fn follow<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    task: &'static str,
    what: &'static str,
    stale: &'static str,
    stop: CancellationToken,
    on_event: impl FnMut(&watcher::Event<K>),
) {
    let metrics = METRICS.get().cloned().unwrap_or_default();
    follow_into(&metrics, events, task, what, stale, stop, on_event).await;
}

async fn follow_into<K>(
    metrics: &WatchMetrics,
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    task: &'static str,
    what: &'static str,
    stale: &'static str,
    stop: CancellationToken,
    mut on_event: impl FnMut(&watcher::Event<K>),
) {
    let labels = WatchLabels { task: task.to_owned(), objects: what.to_lowercase().replace(' ', "_") };
    let failing = metrics.failing.get_or_create(&labels).clone();
    failing.set(0);
    let mut events = pin!(events);
    let mut failing_since: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            Some(Ok(event)) => {
                if let Some(since) = failing_since.take() {
                    let failed_for_s = since.elapsed().as_secs();
                    tracing::info!(task, failed_for_s, "watching {what} again");
                    failing.set(0);
                }
                on_event(&event);
            }
            Some(Err(error)) => {
                if failing_since.is_none() {
                    let error = crate::error::watch_line(&error);
                    tracing::warn!(task, %error,
                        "cannot watch {what}; {stale} until it works (retried with backoff)");
                    failing_since = Some(Instant::now());
                    failing.set(1);
                    metrics.failures.get_or_create(&labels).inc();
                }
            }
            None => return,
        }
    }
}

/// Drops the field sets (`managedFields[].fieldsV1`) of a cached object, keeping who wrote it and
/// when. Why: the field sets are trees of every field each manager owns, often larger than the
/// object itself, and no cache reader looks at them; a thousand sources are held in several
/// caches.
pub fn without_field_sets<K: Resource>(object: &mut K) {
    for entry in object.meta_mut().managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::{Error, Event};

    use super::*;

    /// Waits (bounded) until `done` holds; answers whether it did.
    async fn eventually(done: impl Fn() -> bool) -> bool {
        for _ in 0..200 {
            if done() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        done()
    }

    #[tokio::test]
    async fn an_outage_is_one_failure_and_the_gauge_holds_until_an_event_comes() {
        let metrics = WatchMetrics::default();
        let labels = WatchLabels { task: "scaler".into(), objects: "reader_leases".into() };
        let (send, receive) = futures::channel::mpsc::unbounded::<Result<Event<ConfigMap>, Error>>();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let watching = tokio::spawn({
            let (metrics, seen) = (metrics.clone(), seen.clone());
            async move {
                let count = |_: &Event<ConfigMap>| {
                    seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                };
                let stop = CancellationToken::new();
                follow_into(&metrics, receive, "scaler", "reader leases", "stale", stop, count).await;
            }
        });
        let failing = metrics.failing.get_or_create(&labels).clone();
        for _ in 0..2 {
            send.unbounded_send(Err(Error::NoResourceVersion)).unwrap();
        }
        assert!(eventually(|| failing.get() == 1).await, "failing while the watch fails");
        send.unbounded_send(Ok(Event::Init)).unwrap();
        send.unbounded_send(Ok(Event::InitDone)).unwrap();
        assert!(eventually(|| failing.get() == 0).await, "not failing once an event comes");
        drop(send);
        watching.await.unwrap();
        assert_eq!(metrics.failures.get_or_create(&labels).get(), 1, "one per outage, not per retry");
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "every event but the failures handed on"
        );
    }

    #[test]
    fn field_sets_go_and_managers_stay() {
        let mut object: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "orders-config", "managedFields": [
                { "manager": "sluice-operator", "operation": "Apply", "time": "2026-12-06T11:00:00Z",
                  "fieldsType": "FieldsV1", "fieldsV1": { "f:data": { "f:source.yaml": {} } } },
            ] },
        }))
        .unwrap();
        without_field_sets(&mut object);
        let entry = &object.metadata.managed_fields.as_ref().unwrap()[0];
        assert_eq!(entry.manager.as_deref(), Some("sluice-operator"));
        assert!(entry.time.is_some() && entry.fields_v1.is_none());
    }
}
