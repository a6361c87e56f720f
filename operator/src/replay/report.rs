//! How a replay tells the three audiences: `status.replay` (its own field manager, so the
//! reconciler's status apply never drops it), Events on start, completion, failure and a batch
//! left behind, and the `sluice_operator_replay_*` metrics.
//!
//! Why the status is written after every batch: it is the replay's memory. A restarted operator
//! reads `replayed`, `uncertain` and the batch journal there and goes on without sending a
//! message twice (see `plan`).

use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use sluice_crds::{ReplayStatus, SqsSource};

/// The field manager of `status.replay`.
pub const FIELD_MANAGER: &str = "sluice-replay";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub namespace: String,
    pub source: String,
    /// `replayed`, `skipped` or `uncertain`.
    pub outcome: &'static str,
}

pub use crate::scaler::metrics::SourceLabels;

/// The replay metrics, under `sluice_operator_replay_`.
#[derive(Clone, Default)]
pub struct ReplayMetrics {
    pub messages: Family<OutcomeLabels, Counter>,
    pub running: Family<SourceLabels, Gauge>,
    pub faults: Family<SourceLabels, Counter>,
}

impl ReplayMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let r = registry.sub_registry_with_prefix("sluice_operator_replay");
        r.register(
            "messages",
            "Dead letters a replay handled, by outcome: replayed (sent back and deleted from the dead-letter queue), skipped (left there: not asked for, or replayed once already by the same request), uncertain (left there: in flight when the operator stopped)",
            metrics.messages.clone(),
        );
        r.register(
            "running",
            "1 while a replay of the source is moving messages, else 0",
            metrics.running.clone(),
        );
        r.register(
            "faults",
            "Failed SQS or Kubernetes calls of a replay (each retried with backoff)",
            metrics.faults.clone(),
        );
        metrics
    }

    /// Creates the source's series at 0, so dashboards and alerts see every source, not only
    /// those that have replayed since the operator started.
    pub fn touch(&self, labels: &SourceLabels) {
        for outcome in ["replayed", "skipped", "uncertain"] {
            let (namespace, source) = (labels.namespace.clone(), labels.source.clone());
            drop(self.messages.get_or_create(&OutcomeLabels { namespace, source, outcome }));
        }
        drop(self.running.get_or_create(labels));
        drop(self.faults.get_or_create(labels));
    }
}

/// Where one replay reports.
pub struct Reporter {
    pub api: Api<SqsSource>,
    pub source: SqsSource,
    pub recorder: Recorder,
    pub metrics: ReplayMetrics,
}

impl Reporter {
    pub fn labels(&self) -> SourceLabels {
        SourceLabels {
            namespace: self.source.meta().namespace.clone().unwrap_or_default(),
            source: self.source.meta().name.clone().unwrap_or_default(),
        }
    }

    /// Counts `n` dead letters of `outcome`.
    pub fn count(&self, outcome: &'static str, n: u64) {
        let SourceLabels { namespace, source } = self.labels();
        self.metrics.messages.get_or_create(&OutcomeLabels { namespace, source, outcome }).inc_by(n);
    }

    /// Writes `status.replay`.
    pub async fn write(&self, status: &ReplayStatus) -> Result<(), String> {
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1",
            "kind": "SqsSource",
            "status": { "replay": status },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let name = self.source.meta().name.clone().unwrap_or_default();
        self.api
            .patch_status(&name, &params, &Patch::Apply(body))
            .await
            .map(drop)
            .map_err(|e| format!("cannot write status.replay: {}", crate::error::kube_line(&e)))
    }

    /// Publishes an Event (best effort: a lost Event never stops a replay).
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_owned(),
            note: Some(note.chars().take(1000).collect()),
            action: "Replay".to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &self.source.object_ref(&())).await {
            tracing::warn!(%error, "replay: cannot publish the event");
        }
    }
}
