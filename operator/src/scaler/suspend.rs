//! `spec.suspend`: the source is paused without being deleted.
//!
//! Why in the scaler: the scaler owns the Deployment's `spec.replicas`, so it is the one writer that
//! can hold it at 0 without a fight; readers scaled away drain as in any scale-down (and under
//! exactlyOnce have their open epoch committed or aborted, since the checkpoint coordinator keeps
//! stepping until their leases are gone). While suspended the scaler reads no queue and decides
//! nothing; its stabilization history is dropped, so a resume sizes the fleet afresh from the
//! queue as it then is. The change is announced once each way (an Event and `lastScaleReason`).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use sluice_crds::SqsSource;

use super::apply::{self, ScaleStatus};
use super::task::{Context, SourceState, Tick, TickError, write_status};
use crate::names::{SCALER_FIELD_MANAGER, reader_name};

/// `status.lastScaleReason` while suspended.
pub const SUSPENDED: &str = "suspended: spec.suspend is true; readers scaled to 0 and drained, the autoscaler stands still until it is false";

/// Whether the source was suspended as this loop last knew it (its memory, or after an operator
/// restart the status it wrote).
fn was_suspended(source: &SqsSource, state: &SourceState) -> bool {
    state.suspended.unwrap_or_else(|| {
        source.status.as_ref().and_then(|s| s.last_scale_reason.as_deref()) == Some(SUSPENDED)
    })
}

/// One interval of a suspended source: replicas to 0 (once), the status and, on the way in, the
/// `Suspended` event.
pub async fn hold(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    deployments: &Api<Deployment>,
    now: Timestamp,
) -> Result<Tick, TickError> {
    let namespace = source.namespace().ok_or(TickError::Incomplete)?;
    let Some(deployment) = ctx.children.deployment(&namespace, &source.name_any()) else {
        return Ok(Tick::NoDeployment);
    };
    let current = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let entering = !was_suspended(source, state);
    state.history = None;
    if current != 0 {
        let params =
            PatchParams { field_manager: Some(SCALER_FIELD_MANAGER.to_owned()), ..Default::default() };
        let body = apply::deployment_replicas(0);
        let answer =
            deployments.patch(&reader_name(&source.name_any()), &params, &Patch::Merge(&body)).await?;
        ctx.own_writes.wrote(&answer);
        tracing::info!(from = current, "suspended: readers scaled to 0");
    }
    if entering || current != 0 {
        state.last_scale = Some((now.to_string(), SUSPENDED.to_owned()));
    }
    let figures = state.status_written.as_ref().map(|s| s.figures.clone()).unwrap_or_default();
    let scale = ScaleStatus { desired: 0, figures, drain_total: 0.0, last_scale: None, fallback: None };
    write_status(ctx, source, state, scale, now).await?;
    if entering {
        let note = format!(
            "{current} -> 0 replicas: spec.suspend is true; readers drain and the source stands still"
        );
        announce(ctx, source, "Suspended", note).await;
    }
    state.suspended = Some(true);
    Ok(Tick::Suspended)
}

/// Called on every interval of a source that is not suspended: announces a resume once.
pub async fn resume(ctx: &Context, source: &SqsSource, state: &mut SourceState) {
    if was_suspended(source, state) {
        tracing::info!("resumed: the autoscaler sizes the readers from the queue again");
        let note = "spec.suspend is false: the autoscaler sizes the readers from the queue again".to_owned();
        announce(ctx, source, "Resumed", note).await;
    }
    state.suspended = Some(false);
}

async fn announce(ctx: &Context, source: &SqsSource, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Suspend".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &source.object_ref(&())).await {
        tracing::warn!(%error, reason, "cannot publish the suspend event");
    }
}
