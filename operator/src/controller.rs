//! Wires reconcile into a kube-runtime `Controller`.
//!
//! Why `DeserializeGuard`: with a plain `Api<SqsSource>`, one object that fails to deserialize
//! (written before a schema change, or with validation bypassed) fails the whole list and so stops
//! every source; guarded, it reaches reconcile as an error value and gets a condition instead.
//! The controller also watches the children it owns, so a deleted or edited child is restored; the
//! echoes of its own writes to them are dropped (see `own_writes`).

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client, Resource};
use sluice_crds::SqsSource;

use crate::access::ApiCall;
use crate::deployment_views::DeploymentViews;
use crate::error::{Error, PERMANENT_FAILURE_REQUEUE};
use crate::names;
use crate::own_writes::{OwnWrites, Seen};
use crate::reconcile::{Context, object_key, reconcile};

/// The watches of the controller (list + watch of the sources and of each owned kind), and its
/// reads and finalizer patches of the sources.
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("sluice.dev", "sqssources", "list"),
    ApiCall::new("sluice.dev", "sqssources", "watch"),
    // The fresh read before each apply, and the finalizer's JSON patches (see `deletion`).
    ApiCall::new("sluice.dev", "sqssources", "get"),
    ApiCall::new("sluice.dev", "sqssources", "patch"),
    ApiCall::new("apps", "deployments", "list"),
    ApiCall::new("apps", "deployments", "watch"),
    ApiCall::new("", "configmaps", "list"),
    ApiCall::new("", "configmaps", "watch"),
    ApiCall::new("", "serviceaccounts", "list"),
    ApiCall::new("", "serviceaccounts", "watch"),
    ApiCall::new("rbac.authorization.k8s.io", "rolebindings", "list"),
    ApiCall::new("rbac.authorization.k8s.io", "rolebindings", "watch"),
];

pub use crate::scope::Scope;

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    scope.api(client)
}

/// The children of kind `K` as they change (their metadata, which is all that names the owner),
/// less the echoes of the operator's own writes, each reported to `own` (see `own_writes`).
fn changes_by_others<K>(
    client: &Client,
    scope: &Scope,
    config: &watcher::Config,
    own: &OwnWrites,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let own = own.clone();
    // `Api<PartialObjectMeta<K>>` asks the server for metadata only.
    watcher(api::<PartialObjectMeta<K>>(client, scope), config.clone()).default_backoff().try_filter_map(
        move |event| {
            let child = match event {
                watcher::Event::Apply(child) | watcher::Event::InitApply(child) => {
                    own.saw(Seen::Applied(&child)).then_some(child)
                }
                watcher::Event::Delete(child) => own.saw(Seen::Deleted(&child)).then_some(child),
                watcher::Event::Init | watcher::Event::InitDone => None,
            };
            std::future::ready(Ok(child))
        },
    )
}

/// The reader Deployments as they change in what the reconciler reads of them (see
/// `deployment_views`), less the echoes of the operator's own writes, each reported to `own`.
/// Whole objects, not metadata: the rollout is in the status.
fn deployment_changes_by_others(
    client: &Client,
    scope: &Scope,
    config: &watcher::Config,
    own: &OwnWrites,
) -> impl futures::Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static {
    let own = own.clone();
    let mut views = DeploymentViews::default();
    watcher(api::<Deployment>(client, scope), config.clone()).default_backoff().try_filter_map(move |event| {
        let child = match event {
            watcher::Event::Apply(child) | watcher::Event::InitApply(child) => {
                let by_others = own.saw(Seen::Applied(&child));
                // Recorded for every event, echoes too: an echo's view is the one to compare with.
                let changed = views.changed(&child);
                (by_others && changed).then_some(child)
            }
            watcher::Event::Delete(child) => {
                views.forget(&child);
                own.saw(Seen::Deleted(&child)).then_some(child)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        std::future::ready(Ok(child))
    })
}

/// What to do after a failed reconcile: back off on transient errors, wait long on the rest.
pub fn error_policy(object: Arc<DeserializeGuard<SqsSource>>, error: &Error, ctx: Arc<Context>) -> Action {
    if error.is_transient() {
        Action::requeue(ctx.failures.failed(&object_key(object.meta())))
    } else {
        Action::requeue(PERMANENT_FAILURE_REQUEUE)
    }
}

/// How many sources are reconciled at once by default (`--reconciles-at-once`). Why a bound
/// (kube-runtime's default has none): a reconcile makes about a dozen API calls and a
/// GetQueueAttributes, and a thousand sources applied together (or found together when the
/// operator starts) would otherwise start a thousand reconciles at once, which the API server's
/// priority and fairness answers with 429s for every request of the operator's flow, its leader
/// Lease renewal among them. A reconcile takes about 130 ms on a quiet cluster, so this many at a
/// time still makes about sixty a second.
pub const RECONCILES_AT_ONCE: u16 = 8;

/// Runs the controller until `shutdown` resolves, then lets in-flight reconciles finish.
///
/// Signals are handled once, in `main`, which cancels every task (controller, autoscaler,
/// checkpoint coordinator) together; `shutdown_on_signal` here would leave the others running.
pub async fn run(
    ctx: Arc<Context>,
    scope: Scope,
    at_once: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    // Children carry our labels; watching only those keeps the operator's caches small.
    let children =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={}", names::FIELD_MANAGER));
    // A source's own changes start a reconcile when its spec (generation, which a deletion also
    // bumps), labels, annotations or finalizers change, not its status: the autoscaler, the
    // checkpoint coordinator and the sink health task write status on their own clocks, and each
    // write would otherwise cost a reconcile (six applies and a GetQueueAttributes), about one a
    // minute per idle source. Children's changes by other writers still start one (`owns_stream`),
    // and a healthy source is rechecked on the reconciler's requeue.
    let (store, writer) = reflector::store();
    let sources = watcher(
        api::<DeserializeGuard<SqsSource>>(&client, &scope),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(crate::cache_watch::without_field_sets)
    .reflect(writer)
    .applied_objects()
    .predicate_filter(
        predicates::generation
            .combine(predicates::labels)
            .combine(predicates::annotations)
            .combine(predicates::finalizers),
        Default::default(),
    )
    // The reconcile that adds the finalizer goes on to apply the children; the patch's own watch
    // event would start a second one (see `deletion::fresh`).
    .try_filter({
        let own = ctx.own_writes.clone();
        move |source| std::future::ready(!own.is_echo(source))
    });
    let own = ctx.own_writes.clone();
    Controller::for_stream(sources, store)
        .with_config(controller::Config::default().concurrency(at_once))
        .owns_stream(deployment_changes_by_others(&client, &scope, &children, &own))
        .owns_stream(changes_by_others::<ConfigMap>(&client, &scope, &children, &own))
        .owns_stream(changes_by_others::<ServiceAccount>(&client, &scope, &children, &own))
        .owns_stream(changes_by_others::<RoleBinding>(&client, &scope, &children, &own))
    .graceful_shutdown_on(shutdown)
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        match result {
            Ok((object, _)) => tracing::debug!(namespace = object.namespace.as_deref().unwrap_or_default(), source = %object.name, "reconciled"),
            Err(e) => tracing::debug!(error = %e, "reconcile did not complete"),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::{Request, Response};
    use kube::client::Body;
    use kube::runtime::events::{Recorder, Reporter};

    use super::*;
    use crate::backoff::Failures;
    use crate::queue_check::sqs::SqsInspector;

    fn context() -> Arc<Context> {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let reporter = Reporter { controller: "test".into(), instance: None };
        let aws = aws_config::SdkConfig::builder().build();
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            inspector: Arc::new(SqsInspector::new(aws)),
            reader_image: None,
            metrics: crate::metrics::Metrics::default(),
            failures: Failures::default(),
            own_writes: Default::default(),
        })
    }

    fn object(name: &str) -> Arc<DeserializeGuard<SqsSource>> {
        let mut source = SqsSource::new(
            name,
            serde_json::from_value(serde_json::json!({
                "queues": [{"url": "https://sqs.us-east-1.amazonaws.com/1/q"}],
                "sinks": [{"name": "s", "log": {}}],
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        );
        source.metadata.namespace = Some("ns".into());
        Arc::new(DeserializeGuard(Ok(source)))
    }

    fn api_error(code: u16, reason: &str) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status::failure(reason, reason).with_code(code))))
    }

    #[tokio::test]
    async fn transient_errors_back_off_per_object_and_permanent_ones_wait() {
        let ctx = context();
        let conflict = api_error(409, "Conflict");
        let a = object("a");
        assert_eq!(error_policy(a.clone(), &conflict, ctx.clone()), Action::requeue(Duration::from_secs(5)));
        assert_eq!(error_policy(a.clone(), &conflict, ctx.clone()), Action::requeue(Duration::from_secs(10)));
        assert_eq!(
            error_policy(object("b"), &conflict, ctx.clone()),
            Action::requeue(Duration::from_secs(5))
        );
        let rejected = api_error(422, "Invalid");
        assert_eq!(
            error_policy(a.clone(), &rejected, ctx.clone()),
            Action::requeue(PERMANENT_FAILURE_REQUEUE)
        );
        let forbidden = api_error(403, "Forbidden");
        assert_eq!(error_policy(a, &forbidden, ctx), Action::requeue(PERMANENT_FAILURE_REQUEUE));
    }
}
