//! The I/O of `spec.scaling.fallback`: an interval whose queue read failed, and the first good
//! read after such intervals.
//!
//! The rule is `fallback` (pure); this module counts the failures in the loop's state, writes the
//! replica count the rule names (as a decision's would be written), `status.fallback`, the
//! `Fallback` condition (a JSON patch of that one entry, as `SinksHealthy` is written), the
//! metrics, and one event each way: Warning FallbackApplied as the fallback starts, Normal
//! FallbackEnded at the first good read after it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use sluice_crds::{FallbackStatus, ScalingSpec, SqsSource};

use super::apply::ScaleStatus;
use super::attributes::AttributesError;
use super::fallback::{self, Blindness, FALLBACK, Sight, Verdict};
use super::metrics::SourceLabels;
use super::task::{Change, Context, SourceState, TickError, apply_replicas, write_status};
use crate::condition_patch::{condition_patch, since};
use crate::names::SCALER_FIELD_MANAGER;

fn labels_of(source: &SqsSource) -> SourceLabels {
    SourceLabels { namespace: source.namespace().unwrap_or_default(), source: source.name_any() }
}

/// Whether the fallback applied as this loop last knew it (its memory, or after an operator
/// restart the status it wrote).
fn was_applied(source: &SqsSource, state: &SourceState) -> bool {
    state.fallback_applied.unwrap_or_else(|| source.status.as_ref().is_some_and(|s| s.fallback.is_some()))
}

/// One interval whose queue read failed with `error`: one more failure in a row; below the
/// threshold the replicas are left alone, from it on the fallback's count is written.
pub async fn interval(
    ctx: &Context,
    source: &SqsSource,
    state: &mut SourceState,
    deployments: &Api<Deployment>,
    error: &AttributesError,
    now: Timestamp,
) -> Result<(), TickError> {
    let line = error.to_string();
    let blindness = match state.blindness.take() {
        Some(before) => before.again(line),
        None => Blindness::first(now, line),
    };
    state.blindness = Some(blindness.clone());
    let namespace = source.namespace().ok_or(TickError::Incomplete)?;
    let Some(deployment) = ctx.children.deployment(&namespace, &source.name_any()) else {
        return Ok(());
    };
    let current = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let spec = &source.spec.scaling;
    let sight = fallback::sight(spec, Some(&blindness), current);
    ctx.metrics.sight(&labels_of(source), blindness.failures, sight.applies());
    let entering = sight.applies() && !was_applied(source, state);
    let desired = sight.replicas(current).unwrap_or(current);
    let verdict = fallback::condition(spec, &sight);
    if sight.applies() {
        let reason = format!("spec.scaling.fallback: {}", verdict.message);
        apply_replicas(ctx, source, state, deployments, Change { current, desired, reason: &reason }, now)
            .await?;
    }
    state.fallback_applied = Some(sight.applies());
    let last = state.status_written.clone();
    let scale = ScaleStatus {
        desired,
        figures: last.as_ref().map(|s| s.figures.clone()).unwrap_or_default(),
        drain_total: last.as_ref().map_or(0.0, |s| s.drain_total),
        last_scale: None,
        fallback: fallback_status(&sight),
    };
    write_status(ctx, source, state, scale, now).await?;
    write_condition(ctx, source, &verdict).await?;
    if entering {
        tracing::warn!(from = current, to = desired, "{}", verdict.message);
        let note = format!("{current} -> {desired} replicas: {}", verdict.message);
        announce(ctx, source, EventType::Warning, "FallbackApplied", note).await;
    }
    Ok(())
}

/// A good read: the failures in a row end, and if the fallback applied, it ends with an event.
pub async fn seeing(ctx: &Context, source: &SqsSource, state: &mut SourceState) {
    let blindness = state.blindness.take();
    ctx.metrics.sight(&labels_of(source), 0, false);
    if was_applied(source, state) {
        let note = match blindness {
            Some(b) => format!(
                "the queue's attributes are readable again after {} failed reads since {}: the autoscaler sizes the readers from the queue",
                b.failures, b.since
            ),
            None => "the queue's attributes are readable: the autoscaler sizes the readers from the queue"
                .to_owned(),
        };
        tracing::info!("{note}");
        announce(ctx, source, EventType::Normal, "FallbackEnded", note).await;
    }
    state.fallback_applied = Some(false);
}

/// The condition while the queue is read.
pub fn seeing_verdict(spec: &ScalingSpec) -> Verdict {
    fallback::condition(spec, &Sight::Seeing)
}

fn fallback_status(sight: &Sight) -> Option<FallbackStatus> {
    let Sight::Fallback { blindness, behavior, replicas } = sight else { return None };
    Some(FallbackStatus {
        behavior: behavior.as_str().to_owned(),
        replicas: *replicas,
        consecutive_failures: blindness.failures,
        since: blindness.since.to_string(),
        last_error: blindness.last_error.clone(),
    })
}

/// Writes the `Fallback` condition when it differs from the source's (once the reconciler has
/// written its conditions: until then there is no list to add it to without racing its first
/// apply; see `condition_patch`).
/// The patch is made from the watched copy, which is almost always current; when the server
/// refuses it (the copy was stale: the patch's test failed, or it would add a second entry of
/// the type), the source is read afresh and the patch made again from that, once.
pub async fn write_condition(ctx: &Context, source: &SqsSource, verdict: &Verdict) -> Result<(), TickError> {
    let (Some(namespace), Some(status)) = (source.namespace(), source.status.as_ref()) else {
        return Ok(());
    };
    let sources: Api<SqsSource> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(write_fallback(&sources, source, &status.conditions, verdict).await?)
}

/// [`write_condition`] on `sources`, from the `watched` conditions.
async fn write_fallback(
    sources: &Api<SqsSource>,
    source: &SqsSource,
    watched: &[Condition],
    verdict: &Verdict,
) -> Result<(), kube::Error> {
    match patch_condition(sources, source, watched, verdict).await {
        Err(kube::Error::Api(refused)) if refused.code == 422 => {
            let fresh = sources.get(&source.name_any()).await?;
            let conditions = fresh.status.map(|s| s.conditions).unwrap_or_default();
            patch_condition(sources, source, &conditions, verdict).await
        }
        other => other,
    }
}

/// Patches the `Fallback` condition into `conditions` (the source's, as far as known) unless they
/// already say what `verdict` says.
async fn patch_condition(
    sources: &Api<SqsSource>,
    source: &SqsSource,
    conditions: &[Condition],
    verdict: &Verdict,
) -> Result<(), kube::Error> {
    if holds(conditions, verdict) {
        return Ok(());
    }
    let previous = conditions.iter().find(|c| c.type_ == FALLBACK);
    let condition = Condition {
        type_: FALLBACK.to_owned(),
        status: verdict.status.to_owned(),
        reason: verdict.reason.to_owned(),
        message: verdict.message.clone(),
        last_transition_time: since(previous, verdict.status, Timestamp::now()),
        observed_generation: source.meta().generation,
    };
    let Some(patch) = condition_patch(conditions, &condition) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    let params =
        PatchParams { field_manager: Some(SCALER_FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    sources.patch_status(&source.name_any(), &params, &Patch::Json::<()>(patch)).await?;
    Ok(())
}

/// Whether `conditions` already say what `verdict` says.
fn holds(conditions: &[Condition], verdict: &Verdict) -> bool {
    conditions.iter().any(|c| {
        c.type_ == FALLBACK
            && c.status == verdict.status
            && c.reason == verdict.reason
            && c.message == verdict.message
    })
}

async fn announce(ctx: &Context, source: &SqsSource, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: "Scale".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &source.object_ref(&())).await {
        tracing::warn!(%error, reason, "cannot publish the fallback event");
    }
}

#[cfg(test)]
#[path = "blind_tests.rs"]
mod tests;
