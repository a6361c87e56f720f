//! Keeps a watch-fed cache in step, saying when its watch fails and when it works again.
//!
//! Why one helper: every cache of the operator's background tasks (the SqsSources the follower
//! tasks walk, the reader Deployments and leases the autoscaler reads) is filled by a watch with
//! backoff, and while a watch fails its cache keeps what it last saw. A person needs one WARN line
//! when that starts (naming what goes stale) and one INFO line when it ends, not one per retry.

use std::pin::pin;
use std::time::Instant;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

/// Drives `events` (a watch already reflected into its store) until it ends or `stop`. `task` names
/// the task in the log lines, `what` the objects watched, `stale` what goes stale while it fails.
pub async fn follow<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    task: &'static str,
    what: &'static str,
    stale: &'static str,
    stop: CancellationToken,
) {
    let mut events = pin!(events);
    let mut failing_since: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            Some(Ok(_)) => {
                if let Some(since) = failing_since.take() {
                    let failed_for_s = since.elapsed().as_secs();
                    tracing::info!(task, failed_for_s, "watching {what} again");
                }
            }
            Some(Err(error)) => {
                if failing_since.is_none() {
                    let error = crate::error::watch_line(&error);
                    tracing::warn!(task, %error,
                        "cannot watch {what}; {stale} until it works (retried with backoff)");
                    failing_since = Some(Instant::now());
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

    #[test]
    fn field_sets_go_and_managers_stay() {
        let mut object: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "orders-config", "managedFields": [
                { "manager": "sluice-operator", "operation": "Apply", "time": "2026-12-06T11:00:00Z",
                  "fieldsType": "FieldsV1", "fieldsV1": { "f:data": { "f:source.yaml": {} } } },
            ] },
        }))
        .unwrap();
        super::without_field_sets(&mut object);
        let entry = &object.metadata.managed_fields.as_ref().unwrap()[0];
        assert_eq!(entry.manager.as_deref(), Some("sluice-operator"));
        assert!(entry.time.is_some() && entry.fields_v1.is_none());
    }
}
