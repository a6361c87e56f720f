//! What the scaler writes: bodies that name only the scaler's own fields (server-side applies, and
//! a merge patch for the Deployment's replicas).
//!
//! Why SSA with a field manager of its own (`sluice-scaler`): the reconciler applies the reader
//! Deployment without `spec.replicas`, the scaler applies nothing but `spec.replicas`, and the API
//! server's field ownership guarantees neither ever resets the other. The same holds for the
//! checkpoint ConfigMap (the coordinator's keys vs. our `replicas`) and for the status (the
//! reconciler's conditions vs. our scale fields). The bodies are pure so tests compare them exactly.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use sluice_crds::{FallbackStatus, QueueFigures};

use crate::names::checkpoint_name;

/// The Deployment's replicas, as a merge patch and not an apply: a patch of a Deployment that is
/// gone fails with 404, where an apply would create one. The source (and with it the Deployment) may
/// be deleted between the scaler's read and this write; an apply would then leave behind an
/// ownerless Deployment holding nothing but replicas. The scaler's field manager still owns
/// `spec.replicas` (an Update entry), which the reconciler's applies never name.
pub fn deployment_replicas(replicas: i32) -> Value {
    json!({ "spec": { "replicas": replicas } })
}

/// The checkpoint ConfigMap apply: data key `replicas`, which readers divide the source-wide rate
/// limit by. The owner reference makes a ConfigMap created by this apply (before the coordinator's)
/// go away with its source; an owner reference identical to the coordinator's is shared, not doubled.
pub fn checkpoint_replicas(source: &str, replicas: i32, owner: &OwnerReference) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": checkpoint_name(source), "ownerReferences": [owner] },
        "data": { "replicas": replicas.max(0).to_string() },
    })
}

/// The scaler's part of the SqsSource status.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleStatus {
    pub desired: i32,
    pub figures: QueueFigures,
    /// Summed over live readers, messages per second.
    pub drain_total: f64,
    /// When and why replicas last changed (kept across applies: an apply that omits a field the
    /// manager owned removes it).
    pub last_scale: Option<(String, String)>,
    /// The fallback in force while the queue cannot be read; `None` removes `status.fallback`.
    pub fallback: Option<FallbackStatus>,
}

impl ScaleStatus {
    /// Whether writing `self` after `before` would tell a reader of the status anything new; the
    /// drain rate is compared to a tenth of a message per second, so a busy source is not
    /// rewritten every interval for noise.
    pub fn differs_from(&self, before: &ScaleStatus) -> bool {
        let tenths = |rate: f64| (rate * 10.0).round() as i64;
        self.desired != before.desired
            || self.figures != before.figures
            || tenths(self.drain_total) != tenths(before.drain_total)
            || self.last_scale != before.last_scale
            || self.fallback != before.fallback
    }
}

/// The status apply (to the status subresource). `observed_at` is stamped on the figures.
pub fn status(status: &ScaleStatus, observed_at: &str) -> Value {
    let mut fields = json!({
        "desiredReplicas": status.desired,
        "queue": QueueFigures { observed_at: Some(observed_at.to_owned()), ..status.figures.clone() },
        "rates": { "drainPerSecond": status.drain_total },
    });
    if let Some((time, reason)) = &status.last_scale {
        fields["lastScaleTime"] = json!(time);
        fields["lastScaleReason"] = json!(reason);
    }
    if let Some(fallback) = &status.fallback {
        fields["fallback"] = json!(fallback);
    }
    json!({ "apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource", "status": fields })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "sluice.dev/v1alpha1".into(),
            kind: "SqsSource".into(),
            name: "orders".into(),
            uid: "u-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn deployment_patch_names_only_replicas() {
        assert_eq!(deployment_replicas(7), json!({ "spec": { "replicas": 7 } }));
    }

    #[test]
    fn checkpoint_apply_names_only_the_replicas_key() {
        let body = checkpoint_replicas("orders", 3, &owner());
        assert_eq!(body["metadata"]["name"], "orders-checkpoint");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(body["data"], json!({ "replicas": "3" }));
    }

    #[test]
    fn status_apply_carries_only_scaler_fields() {
        let figures = QueueFigures { visible: 5, in_flight: 2, delayed: 0, observed_at: None };
        let mut scale =
            ScaleStatus { desired: 2, figures, drain_total: 12.5, last_scale: None, fallback: None };
        let body = status(&scale, "2026-11-29T21:00:00Z");
        assert_eq!(
            body["status"],
            json!({
                "desiredReplicas": 2,
                "queue": { "visible": 5, "inFlight": 2, "delayed": 0, "observedAt": "2026-11-29T21:00:00Z" },
                "rates": { "drainPerSecond": 12.5 },
            })
        );
        scale.last_scale = Some(("2026-11-29T20:59:00Z".into(), "backlog 5".into()));
        let body = status(&scale, "2026-11-29T21:00:00Z");
        assert_eq!(body["status"]["lastScaleTime"], "2026-11-29T20:59:00Z");
        assert_eq!(body["status"]["lastScaleReason"], "backlog 5");
        scale.fallback = Some(FallbackStatus {
            behavior: "atLeastCurrent".into(),
            replicas: 1,
            consecutive_failures: 3,
            since: "2026-11-29T20:58:00Z".into(),
            last_error: "queue q: connection refused".into(),
        });
        let body = status(&scale, "2026-11-29T21:00:00Z");
        assert_eq!(body["status"]["fallback"]["consecutiveFailures"], 3);
        assert_eq!(body["status"]["fallback"]["behavior"], "atLeastCurrent");
    }

    #[test]
    fn noise_in_the_drain_rate_is_not_news() {
        let figures = QueueFigures { visible: 5, in_flight: 2, delayed: 0, observed_at: None };
        let before =
            ScaleStatus { desired: 2, figures, drain_total: 12.51, last_scale: None, fallback: None };
        assert!(!ScaleStatus { drain_total: 12.54, ..before.clone() }.differs_from(&before));
        assert!(ScaleStatus { drain_total: 12.7, ..before.clone() }.differs_from(&before));
        assert!(ScaleStatus { desired: 3, ..before.clone() }.differs_from(&before));
    }
}
