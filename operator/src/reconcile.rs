//! One reconcile of one `SqsSource`: fresh read → validate → build → apply → inspect queues and
//! the other targets → status + events.
//!
//! Why this order and these exits:
//! - A source carries the operator's finalizer (see `deletion`): a deleted one gets no reconcile
//!   but the one that releases the finalizer, after which owner references let the garbage
//!   collector remove the children. Each reconcile first reads the source afresh and stops,
//!   silently, if it is gone, replaced (another uid) or being deleted: the cache may be stale.
//!   A source that vanished mid-reconcile is not a failure and gets no Warning.
//! - An invalid spec gets conditions and Events and no new children; children of its last valid
//!   generation stay as they are, so a typo does not stop a running pipeline. It then waits for a
//!   change: retrying cannot fix it.
//! - An object that does not even parse (written around the schema) gets the same treatment, so
//!   one bad object never blocks the watch of all the others.
//! - Queue and target problems are conditions, not errors: the children are still applied, and
//!   the source is checked again sooner.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Api, Client, Resource, ResourceExt};
use sluice_crds::{SqsSource, SqsSourceStatus};

use crate::apply::apply_children;
use crate::backoff::Failures;
use crate::build::build;
use crate::conditions::{Computed, Outcome, checkpoint_not_applicable, compute, differs, owned_status};
use crate::deletion::{self, FINALIZER};
use crate::error::{Error, Result};
use crate::events::{Happened, Notice, notices, publish};
use crate::metrics::{Metrics, SourceLabels};
use crate::own_writes::OwnWrites;
use crate::queue_check::targets::check_all;
use crate::queue_check::{QueueInspector, inspect_all};
use crate::status::update_status;
use crate::validate::{Problem, validate};

/// Check a healthy source's queues and readers again after this long.
///
/// Why half an hour and not a minute: a change to the source, or to any of its children (the
/// readers' Deployment among them), reconciles at once through the watches, and the autoscaler
/// reads each queue every interval (a queue that stops answering turns its `Fallback` condition
/// within `failureThreshold` readings). What only this recheck sees is a queue's settings changed
/// in AWS, which is rare; at one a minute, an operator serving a thousand idle sources would spend
/// 17 reconciles a second (each a GetQueueAttributes and nine API calls) on finding nothing.
pub const HEALTHY_REQUEUE: Duration = Duration::from_secs(30 * 60);
/// Check again sooner while a queue is unreachable or misconfigured.
pub const UNHEALTHY_REQUEUE: Duration = Duration::from_secs(20);

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub inspector: Arc<dyn QueueInspector>,
    /// The operator's `--reader-image`, used when a spec names none.
    pub reader_image: Option<String>,
    pub metrics: Metrics,
    pub failures: Failures,
    /// The children's versions this process wrote (their watch events start no reconcile).
    pub own_writes: OwnWrites,
}

/// Key of an object for logs and the backoff map.
pub fn object_key(meta: &kube::core::ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

/// The reconciler kube-runtime calls.
#[tracing::instrument(name = "reconcile", skip_all, fields(
    source = %object.meta().name.as_deref().unwrap_or_default(),
    namespace = %object.meta().namespace.as_deref().unwrap_or_default(),
))]
pub async fn reconcile(object: Arc<DeserializeGuard<SqsSource>>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let key = object_key(object.meta());
    let result = match &object.0 {
        Ok(source) => {
            crate::reconcile_wait::observe(source);
            reconcile_guarded(source, &ctx).await
        }
        Err(invalid) => reconcile_unparseable(invalid, &ctx).await,
    };
    let result = match result {
        Err(Error::SourceGone) => {
            tracing::debug!("gone, replaced or being deleted; nothing to do");
            Ok(Action::await_change())
        }
        other => other,
    };
    ctx.metrics.observe(started.elapsed(), result.as_ref().err().map(Error::metric_label));
    match &result {
        Ok(_) => ctx.failures.succeeded(&key),
        Err(e) => {
            tracing::warn!(error = %e, "reconcile failed");
            let note = format!("{e}: {}", e.remedy());
            let notice = Notice { warning: true, reason: "ReconcileFailed".to_owned(), note };
            publish(&ctx.recorder, &reference(object.meta()), &[notice]).await;
        }
    }
    result
}

/// Runs the reconcile under the finalizer: reconciles a live source (adding the finalizer first,
/// see `deletion::fresh`), and releases it from a deleted one.
async fn reconcile_guarded(source: &SqsSource, ctx: &Context) -> Result<Action> {
    let name = source.name_any();
    let namespace =
        source.namespace().ok_or_else(|| Error::Build(format!("source {name} has no namespace")))?;
    let api: Api<SqsSource> = Api::namespaced(ctx.client.clone(), &namespace);
    if source.meta().deletion_timestamp.is_none() {
        return reconcile_source(&api, source, ctx).await;
    }
    if !source.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    tracing::info!(source = %object_key(source.meta()), "deleted; the garbage collector removes its children");
    // The register of reader accounts has no owner; the source's entry goes by hand.
    crate::reader_register::withdraw(&ctx.client, &namespace, &name, &ctx.own_writes).await?;
    ctx.metrics.forget(&SourceLabels { namespace: namespace.clone(), source: name.clone() });
    deletion::release(&api, source.meta()).await?;
    Ok(Action::await_change())
}

async fn reconcile_source(api: &Api<SqsSource>, cached: &SqsSource, ctx: &Context) -> Result<Action> {
    let source = &deletion::fresh(api, cached, &ctx.own_writes).await?;
    let name = source.name_any();
    let regarding = source.object_ref(&());
    let report = Report {
        api,
        name: &name,
        regarding: &regarding,
        previous: source.status.as_ref(),
        generation: source.metadata.generation,
    };

    let valid = match validate(source, ctx.reader_image.as_deref()) {
        Ok(valid) => valid,
        Err(problems) => {
            tracing::info!(source = %object_key(source.meta()), problems = problems.len(), "spec invalid");
            let mut computed = compute(Outcome::Invalid { problems: &problems });
            computed.verdicts.extend(checkpoint_not_applicable(&source.spec));
            report.write(ctx, &computed, &problems, None).await?;
            return Ok(Action::await_change());
        }
    };
    let children = build(&valid)?;
    let deployment = apply_children(&ctx.client, &children, &ctx.own_writes).await?;
    let (namespace, name) = (source.namespace().unwrap_or_default(), source.name_any());
    let checks = async {
        (
            inspect_all(ctx.inspector.as_ref(), &source.spec).await,
            check_all(ctx.inspector.as_ref(), &source.spec).await,
        )
    };
    let (queues, targets) = crate::aws_requests::for_source(&namespace, &name, checks).await;
    let computed = compute(Outcome::Applied {
        spec: &source.spec,
        queues: &queues,
        targets: &targets,
        deployment: &deployment,
    });
    report.write(ctx, &computed, &[], Some(&children.config_hash)).await?;
    let queues_ok = computed
        .verdicts
        .iter()
        .filter(|v| {
            v.type_ == crate::conditions::QUEUE_REACHABLE
                || v.type_ == crate::conditions::QUEUE_CONFIG_VALID
                || v.type_ == crate::conditions::TARGETS_REACHABLE
        })
        .all(|v| v.status == "True");
    Ok(Action::requeue(if queues_ok { HEALTHY_REQUEUE } else { UNHEALTHY_REQUEUE }))
}

async fn reconcile_unparseable(invalid: &InvalidObject, ctx: &Context) -> Result<Action> {
    let meta = &invalid.metadata;
    let (Some(name), Some(namespace)) = (&meta.name, &meta.namespace) else {
        return Ok(Action::await_change());
    };
    if meta.deletion_timestamp.is_some() {
        let guarded: Api<DeserializeGuard<SqsSource>> = Api::namespaced(ctx.client.clone(), namespace);
        deletion::release(&guarded, meta).await?;
        return Ok(Action::await_change());
    }
    tracing::warn!(source = %object_key(meta), error = %invalid.error, "object does not parse");
    let api: Api<SqsSource> = Api::namespaced(ctx.client.clone(), namespace);
    let problem = Problem {
        reason: "SpecUnparseable",
        field: "spec".to_owned(),
        message: format!(
            "the object does not match the SqsSource schema ({}): fix the field it names and apply again",
            invalid.error
        ),
    };
    let computed = compute(Outcome::Unparseable { error: &invalid.error });
    let regarding = reference(meta);
    let report =
        Report { api: &api, name, regarding: &regarding, previous: None, generation: meta.generation };
    report.write(ctx, &computed, &[problem], None).await?;
    Ok(Action::await_change())
}

/// Where and against what a reconcile reports.
struct Report<'a> {
    api: &'a Api<SqsSource>,
    name: &'a str,
    regarding: &'a ObjectReference,
    previous: Option<&'a SqsSourceStatus>,
    generation: Option<i64>,
}

impl Report<'_> {
    /// Publishes the Events this reconcile warrants, then writes the status if it changed.
    async fn write(
        &self,
        ctx: &Context,
        computed: &Computed,
        problems: &[Problem],
        config_hash: Option<&str>,
    ) -> Result<()> {
        let happened = Happened {
            previous: self.previous,
            generation: self.generation,
            computed,
            problems,
            config_hash,
        };
        publish(&ctx.recorder, self.regarding, &notices(&happened)).await;
        let status = owned_status(computed, self.previous, self.generation, Timestamp::now());
        let labels = SourceLabels {
            namespace: self.regarding.namespace.clone().unwrap_or_default(),
            source: self.name.to_owned(),
        };
        ctx.metrics.source_status(&labels, &status);
        if differs(self.previous, &status) {
            update_status(self.api, self.name, &status).await.map_err(|e| match e {
                Error::Kube(e) => deletion::gone_if_not_found(e),
                other => other,
            })?;
        }
        Ok(())
    }
}

/// An object reference built from metadata alone (for objects that did not parse).
fn reference(meta: &kube::core::ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some(SqsSource::api_version(&()).into_owned()),
        kind: Some(SqsSource::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: None,
        field_path: None,
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
