//! Reconcile against a mocked API server: every request is asserted (method, path, body) in
//! order, each within a timeout, and no request may follow the expected ones.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::client::Body;
use kube::core::DeserializeGuard;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use sluice_crds::{QueueRef, SqsSource};
use tower_test::mock;

use super::*;
use crate::fixtures;
use crate::own_writes::Seen;
use crate::queue_check::{QueueAttributes, QueueError};

const STEP: Duration = Duration::from_secs(5);

struct FakeQueues(Result<QueueAttributes, QueueError>);

impl QueueInspector for FakeQueues {
    fn inspect<'a>(&'a self, _: &'a QueueRef) -> BoxFuture<'a, Result<QueueAttributes, QueueError>> {
        let result = self.0.clone();
        async move { result }.boxed()
    }
}

/// The fixtures name no sqs or s3 sink; a target check would be a bug in `targets()`.
impl crate::queue_check::targets::TargetInspector for FakeQueues {
    fn check<'a>(
        &'a self,
        target: &'a crate::queue_check::targets::Target,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        panic!("no target to check in these fixtures, asked for {}", target.field)
    }
}

fn healthy_queue() -> Result<QueueAttributes, QueueError> {
    Ok(QueueAttributes {
        url: "https://sqs.us-east-1.amazonaws.com/123456789012/orders".into(),
        visibility_timeout_seconds: 30,
        redrive_policy: Some(r#"{"maxReceiveCount":5}"#.into()),
        maximum_message_size: 1_048_576,
        visible: 4,
        ..QueueAttributes::default()
    })
}

type Check = Box<dyn Fn(&Value) + Send>;

/// One request the reconcile must make next.
enum Expect {
    /// The fresh GET of the source; answered with this body, or 404 when None.
    Read(Option<Value>),
    /// A JSON patch of the source's finalizers: adding ours (true) or removing it (false).
    Finalizer { add: bool },
    /// A server-side apply of a child at this path.
    Apply { path: String, check: Check },
    /// An Event with this type and reason.
    Event { warning: bool, reason: String },
    /// The status apply.
    Status { check: Check },
    /// The GET of the reader Deployment: 404 (it is created now), else one whose `spec.replicas`
    /// the autoscaler owns.
    ReadDeployment { exists: bool },
    /// After a create, the autoscaler's field manager taking `spec.replicas` over.
    HandOver { replicas: i64 },
    /// A merge patch of the register of reader accounts with this `data`.
    Register { data: Value },
    /// The GET of the register, answered with this `data`.
    ReadRegister { data: Value },
}

/// The situations reconcile must handle.
enum Scenario {
    Create,
    NoOp,
    SpecChange,
    InvalidSpec,
    QueueMissing,
    Deletion,
}

fn apply(path: &str, check: impl Fn(&Value) + Send + 'static) -> Expect {
    Expect::Apply { path: path.to_owned(), check: Box::new(check) }
}

fn status(check: impl Fn(&Value) + Send + 'static) -> Expect {
    Expect::Status { check: Box::new(check) }
}

fn event(warning: bool, reason: &str) -> Expect {
    Expect::Event { warning, reason: reason.to_owned() }
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    let found = status["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    match found {
        Some(c) => c,
        None => panic!("no {type_} condition in {status}"),
    }
}

/// The source's key in the register of reader accounts (the reader policy's parameter), merge
/// patched alone.
fn register_entry() -> Expect {
    Expect::Register { data: json!({"orders-reader": "orders"}) }
}

const REGISTER: &str = "/api/v1/namespaces/shop/configmaps/sluice-readers";

/// The six applies in the order they are sent (the register entry first), with the Deployment's config hash handed
/// to `hash`; `created`: the Deployment is new, so its apply names the starting replicas (the
/// default `minReplicas`, 1) and the autoscaler then takes them over.
fn children_applies(hash: impl Fn(&str) + Send + 'static, created: bool) -> Vec<Expect> {
    let mut applies = vec![
        register_entry(),
        apply("/api/v1/namespaces/shop/configmaps/orders-config", |b| {
            assert_eq!(b["kind"], "ConfigMap");
            assert!(b["data"]["source.yaml"].as_str().is_some_and(|s| s.contains("kind: SqsSource")));
        }),
        apply("/api/v1/namespaces/shop/serviceaccounts/orders-reader", |b| {
            assert_eq!(b["kind"], "ServiceAccount");
            assert_eq!(b["metadata"]["ownerReferences"][0]["name"], "orders");
        }),
        // The RoleBinding and the PodDisruptionBudget go with the ConfigMap and account; the
        // Deployment waits for all of them.
        apply("/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings/orders-sluice-reader", |b| {
            assert_eq!(
                b["roleRef"],
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sluice-reader"})
            );
        }),
        apply("/apis/policy/v1/namespaces/shop/poddisruptionbudgets/orders-reader", |b| {
            assert_eq!(b["spec"]["maxUnavailable"], 1);
        }),
        Expect::ReadDeployment { exists: !created },
        apply("/apis/apps/v1/namespaces/shop/deployments/orders-reader", move |b| {
            if created {
                assert_eq!(b["spec"]["replicas"], 1, "a new Deployment starts at minReplicas: {b}");
            } else {
                assert!(b["spec"].get("replicas").is_none(), "the autoscaler's field once it exists: {b}");
            }
            let h = &b["spec"]["template"]["metadata"]["annotations"]["sluice.dev/config-hash"];
            hash(h.as_str().unwrap_or_default());
        }),
    ];
    if created {
        applies.push(Expect::HandOver { replicas: 1 });
    }
    applies
}

fn expectations(scenario: &Scenario, create_hash: Option<String>) -> Vec<Expect> {
    match scenario {
        Scenario::Create => {
            let mut e = children_applies(|h| assert_eq!(h.len(), 16), true);
            e.push(event(false, "ConfigApplied"));
            e.push(status(|s| {
                assert_eq!(s["observedGeneration"], 1);
                assert_eq!(condition(s, "Ready")["status"], "True");
                assert_eq!(condition(s, "Ready")["reason"], "ReadersReady");
                assert_eq!(condition(s, "QueueReachable")["status"], "True");
                assert_eq!(condition(s, "QueueConfigValid")["status"], "True");
                assert_eq!(condition(s, "Degraded")["status"], "False");
                assert_eq!(s["readyReplicas"], 1);
                assert_eq!(s["queue"]["visible"], 4);
                assert!(s.get("desiredReplicas").is_none(), "the autoscaler's field");
            }));
            e
        }
        Scenario::NoOp => {
            let expected = create_hash.unwrap_or_default();
            children_applies(move |h| assert_eq!(h, expected), false)
        }
        Scenario::SpecChange => {
            let old = create_hash.unwrap_or_default();
            let mut e =
                children_applies(move |h| assert_ne!(h, old, "a spec change must roll the pods"), false);
            e.push(event(false, "ConfigApplied"));
            e.push(status(|s| assert_eq!(s["observedGeneration"], 2)));
            e
        }
        Scenario::InvalidSpec => vec![
            event(true, "QueueRefIncomplete"),
            event(true, "CredentialsIncomplete"),
            event(true, "CheckpointIntervalMissing"),
            event(true, "NoSinks"),
            event(true, "ScalingInvalid"),
            status(|s| {
                assert_eq!(s["observedGeneration"], 2);
                let ready = condition(s, "Ready");
                assert_eq!(
                    (ready["status"].as_str(), ready["reason"].as_str()),
                    (Some("False"), Some("SpecInvalid"))
                );
                assert!(ready["message"].as_str().is_some_and(|m| m.contains("checkpointIntervalSeconds")));
                assert_eq!(condition(s, "Degraded")["reason"], "QueueRefIncomplete");
                assert!(s["lastError"].is_string());
            }),
        ],
        Scenario::QueueMissing => {
            let mut e = children_applies(|_| {}, true);
            e.push(event(false, "ConfigApplied"));
            e.push(event(true, "QueueDoesNotExist"));
            e.push(status(|s| {
                let reachable = condition(s, "QueueReachable");
                assert_eq!(reachable["status"], "False");
                assert_eq!(reachable["reason"], "QueueDoesNotExist");
                assert!(
                    reachable["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("123456789012/orders (spec.queues[0]) does not exist"))
                );
                assert_eq!(condition(s, "Ready")["reason"], "QueueUnreachable");
            }));
            e
        }
        // The register read, the source's keys (the current and a renamed account's) set to
        // null, another source's left alone.
        Scenario::Deletion => vec![
            Expect::ReadRegister {
                data: json!({"orders-reader": "orders", "orders-old": "orders", "payments-reader": "payments"}),
            },
            Expect::Register { data: json!({"orders-old": null, "orders-reader": null}) },
            Expect::Finalizer { add: false },
        ],
    }
}

/// A source as the API server holds it once the operator's finalizer is on it.
fn held(mut source: SqsSource) -> SqsSource {
    source.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    source
}

fn deleting(mut source: SqsSource) -> SqsSource {
    source.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH));
    source
}

async fn body_json(request: Request<Body>) -> Value {
    let bytes = match request.into_body().collect_bytes().await {
        Ok(b) => b,
        Err(e) => panic!("unreadable request body: {e}"),
    };
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

fn respond(send: mock::SendResponse<Response<Body>>, value: &Value) {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    match Response::builder().body(Body::from(bytes)) {
        Ok(response) => send.send_response(response),
        Err(e) => panic!("bad response: {e}"),
    }
}

/// A reader Deployment whose `spec.replicas` the autoscaler owns.
fn scaled_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "orders-reader",
            "namespace": "shop",
            "generation": 1,
            "managedFields": [
                { "manager": "sluice-scaler", "operation": "Update", "fieldsType": "FieldsV1",
                  "fieldsV1": { "f:spec": { "f:replicas": {} } } },
            ],
        },
        "spec": { "replicas": 1, "selector": {}, "template": {} },
        "status": { "observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1 },
    })
}

fn not_found(send: mock::SendResponse<Response<Body>>) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
        "message": "sqssources.sluice.dev \"orders\" not found"});
    let bytes = serde_json::to_vec(&status).unwrap_or_default();
    match Response::builder().status(404).body(Body::from(bytes)) {
        Ok(response) => send.send_response(response),
        Err(e) => panic!("bad response: {e}"),
    }
}

/// Answers the expected requests in order and fails on anything else; returns the bodies seen.
async fn verify(
    handle: &mut mock::Handle<Request<Body>, Response<Body>>,
    source: SqsSource,
    expects: Vec<Expect>,
) -> Vec<Value> {
    let mut seen = Vec::new();
    // The Deployment as the last apply answered it: what the hand-over answers too.
    let mut deployment = Value::Null;
    for (i, expect) in expects.into_iter().enumerate() {
        let next = tokio::time::timeout(STEP, handle.next_request()).await;
        let Ok(Some((request, send))) = next else {
            panic!("request {i} never came");
        };
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let body = body_json(request).await;
        let source_path = format!(
            "/apis/sluice.dev/v1alpha1/namespaces/shop/sqssources/{}",
            source.metadata.name.clone().unwrap_or_default()
        );
        match expect {
            Expect::Read(answer) => {
                assert_eq!((&method, path.as_str()), (&Method::GET, source_path.as_str()), "request {i}");
                match answer {
                    Some(answer) => respond(send, &answer),
                    None => not_found(send),
                }
            }
            Expect::Finalizer { add } => {
                assert_eq!((&method, path.as_str()), (&Method::PATCH, source_path.as_str()), "request {i}");
                let ops = body.as_array().cloned().unwrap_or_default();
                let op = if add { "add" } else { "remove" };
                assert!(ops.iter().any(|o| o["op"] == op), "request {i}: {body}");
                assert!(body.to_string().contains(FINALIZER) || !add, "request {i}: {body}");
                respond(send, &serde_json::to_value(&source).unwrap_or_default());
            }
            Expect::Apply { path: want, check } => {
                assert_eq!((&method, path.as_str()), (&Method::PATCH, want.as_str()), "request {i}");
                assert!(
                    query.contains("fieldManager=sluice-operator") && query.contains("force=true"),
                    "{query}"
                );
                check(&body);
                let mut answer = body.clone();
                if answer["kind"] == "Deployment" {
                    answer["metadata"]["generation"] = json!(1);
                    answer["status"] = json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1});
                    deployment = answer.clone();
                }
                respond(send, &answer);
            }
            Expect::Event { warning, reason } => {
                assert_eq!(
                    (&method, path.as_str()),
                    (&Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events"),
                    "request {i}"
                );
                assert_eq!(body["reason"], reason.as_str(), "request {i}: {body}");
                assert_eq!(body["type"], if warning { "Warning" } else { "Normal" });
                assert_eq!(body["regarding"]["name"], source.metadata.name.clone().unwrap_or_default());
                respond(send, &body);
            }
            Expect::ReadDeployment { exists } => {
                let want = "/apis/apps/v1/namespaces/shop/deployments/orders-reader";
                assert_eq!((&method, path.as_str()), (&Method::GET, want), "request {i}");
                if exists {
                    respond(send, &scaled_deployment());
                } else {
                    not_found(send);
                }
            }
            Expect::HandOver { replicas } => {
                let want = "/apis/apps/v1/namespaces/shop/deployments/orders-reader";
                assert_eq!((&method, path.as_str()), (&Method::PATCH, want), "request {i}");
                assert!(
                    query.contains("fieldManager=sluice-scaler") && query.contains("force=true"),
                    "{query}"
                );
                assert_eq!(body["spec"], json!({ "replicas": replicas }), "only the replicas: {body}");
                respond(send, &deployment);
            }
            Expect::Register { data } => {
                assert_eq!((&method, path.as_str()), (&Method::PATCH, REGISTER), "request {i}");
                assert!(
                    query.contains("fieldManager=sluice-operator") && !query.contains("force"),
                    "{query}"
                );
                assert_eq!(body, json!({ "data": data }), "request {i}: only the source's keys");
                // As the server answers: the keys set to null are gone.
                let kept: serde_json::Map<String, Value> = data
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let answer = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "sluice-readers", "namespace": "shop", "resourceVersion": "7"}, "data": kept});
                respond(send, &answer);
            }
            Expect::ReadRegister { data } => {
                assert_eq!((&method, path.as_str()), (&Method::GET, REGISTER), "request {i}");
                let answer = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "sluice-readers", "namespace": "shop", "resourceVersion": "6"}, "data": data});
                respond(send, &answer);
            }
            Expect::Status { check } => {
                let want = format!(
                    "/apis/sluice.dev/v1alpha1/namespaces/shop/sqssources/{}/status",
                    source.metadata.name.clone().unwrap_or_default()
                );
                assert_eq!((&method, path.as_str()), (&Method::PATCH, want.as_str()), "request {i}");
                assert!(
                    query.contains("fieldManager=sluice-operator") && query.contains("force=true"),
                    "{query}"
                );
                assert_eq!(body["kind"], "SqsSource");
                check(&body["status"]);
                let mut answer = serde_json::to_value(&source).unwrap_or_default();
                answer["status"] = body["status"].clone();
                respond(send, &answer);
            }
        }
        seen.push(body);
    }
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await
    {
        panic!("unexpected request {} {}", request.method(), request.uri());
    }
    seen
}

fn context(
    queue: Result<QueueAttributes, QueueError>,
) -> (Arc<Context>, mock::Handle<Request<Body>, Response<Body>>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let reporter = Reporter { controller: "sluice-operator".into(), instance: None };
    let ctx = Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        inspector: Arc::new(FakeQueues(queue)),
        reader_image: Some("ghcr.io/sluice/sluice:0.1.0".into()),
        metrics: crate::metrics::Metrics::default(),
        failures: Failures::default(),
        own_writes: Default::default(),
    };
    (Arc::new(ctx), handle)
}

/// Runs one reconcile of `source` in `scenario`; returns the action and the request bodies.
async fn run(
    scenario: Scenario,
    source: SqsSource,
    queue: Result<QueueAttributes, QueueError>,
    create_hash: Option<String>,
) -> (Action, Vec<Value>) {
    let source = held(source);
    let mut expects = expectations(&scenario, create_hash);
    if !matches!(scenario, Scenario::Deletion) {
        expects.insert(0, Expect::Read(Some(serde_json::to_value(&source).unwrap_or_default())));
    }
    run_expecting(source, queue, expects).await
}

/// Runs one reconcile of `source` (as the cache holds it) against exactly `expects`.
async fn run_expecting(
    source: SqsSource,
    queue: Result<QueueAttributes, QueueError>,
    expects: Vec<Expect>,
) -> (Action, Vec<Value>) {
    let (ctx, mut handle) = context(queue);
    run_in(&ctx, &mut handle, source, expects).await
}

/// Runs one reconcile in `ctx`, whose API server is `handle`, against exactly `expects`.
async fn run_in(
    ctx: &Arc<Context>,
    handle: &mut mock::Handle<Request<Body>, Response<Body>>,
    source: SqsSource,
    expects: Vec<Expect>,
) -> (Action, Vec<Value>) {
    let object = Arc::new(DeserializeGuard(Ok(source.clone())));
    let (action, bodies) = tokio::join!(
        tokio::time::timeout(STEP * 4, reconcile(object, ctx.clone())),
        verify(handle, source, expects)
    );
    let Ok(Ok(action)) = action else {
        panic!("reconcile failed or timed out: {action:?}");
    };
    (action, bodies)
}

fn hash_of(bodies: &[Value]) -> String {
    bodies
        .iter()
        .find(|b| b["kind"] == "Deployment")
        .and_then(|d| d["spec"]["template"]["metadata"]["annotations"]["sluice.dev/config-hash"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A source as the API server returns it after the create scenario wrote its status.
fn after_create(bodies: &[Value]) -> SqsSource {
    let mut source = fixtures::source(fixtures::BASIC);
    let status = bodies.iter().find_map(|b| (b["kind"] == "SqsSource").then(|| b["status"].clone()));
    source.status = status.and_then(|s| serde_json::from_value(s).ok());
    assert!(source.status.is_some());
    source
}

#[tokio::test]
async fn create_applies_children_and_reports_ready() {
    let (action, bodies) =
        run(Scenario::Create, fixtures::source(fixtures::BASIC), healthy_queue(), None).await;
    assert_eq!(action, Action::requeue(HEALTHY_REQUEUE));
    assert_eq!(
        bodies.len(),
        11,
        "the read, the register entry, five children, the Deployment's read and hand-over, an event, the status"
    );
}

#[tokio::test]
async fn an_unchanged_source_only_reapplies_and_writes_nothing_else() {
    let (_, created) = run(Scenario::Create, fixtures::source(fixtures::BASIC), healthy_queue(), None).await;
    let source = after_create(&created);
    let (action, bodies) = run(Scenario::NoOp, source, healthy_queue(), Some(hash_of(&created))).await;
    assert_eq!(action, Action::requeue(HEALTHY_REQUEUE));
    assert_eq!(
        bodies.len(),
        8,
        "the read, the register entry, the Deployment's read and the five children: no event and no status write"
    );
}

/// In one operator: the reconciles after the create (started by the Deployment controller's
/// writes, say) read the source and the Deployment and apply nothing that is as last applied,
/// until someone else changes a child.
#[tokio::test]
async fn reconciles_after_the_first_apply_only_what_changed() {
    let (ctx, mut handle) = context(healthy_queue());
    let source = held(fixtures::source(fixtures::BASIC));
    let mut expects = vec![Expect::Read(Some(serde_json::to_value(&source).unwrap_or_default()))];
    expects.extend(expectations(&Scenario::Create, None));
    let (_, created) = run_in(&ctx, &mut handle, source, expects).await;
    let source = held(after_create(&created));
    let read = || Expect::Read(Some(serde_json::to_value(&source).unwrap_or_default()));

    // The Deployment is read, not applied: without the replicas it would change only who
    // co-owns them.
    let (action, bodies) =
        run_in(&ctx, &mut handle, source.clone(), vec![read(), Expect::ReadDeployment { exists: true }])
            .await;
    assert_eq!(action, Action::requeue(HEALTHY_REQUEUE));
    assert_eq!(bodies.len(), 2, "the source's read and the Deployment's: nothing applied");

    // `kubectl edit` of the ConfigMap (a version the operator did not write) brings its apply back.
    let mut edited = ConfigMap::default();
    edited.metadata.name = Some("orders-config".into());
    edited.metadata.namespace = Some("shop".into());
    edited.metadata.resource_version = Some("999".into());
    assert!(ctx.own_writes.saw(Seen::Applied(&edited)));
    let config = apply("/api/v1/namespaces/shop/configmaps/orders-config", |b| {
        assert_eq!(b["kind"], "ConfigMap");
    });
    let again = vec![read(), config, Expect::ReadDeployment { exists: true }];
    run_in(&ctx, &mut handle, source, again).await;
}

#[tokio::test]
async fn a_spec_change_rolls_the_readers() {
    let (_, created) = run(Scenario::Create, fixtures::source(fixtures::BASIC), healthy_queue(), None).await;
    let mut source = after_create(&created);
    source.metadata.generation = Some(2);
    source.spec.receive.pollers = 8;
    run(Scenario::SpecChange, source, healthy_queue(), Some(hash_of(&created))).await;
}

#[tokio::test]
async fn an_invalid_spec_gets_conditions_and_events_but_no_children() {
    let mut source = fixtures::source(fixtures::INVALID);
    source.metadata.name = Some("orders".into());
    let (action, bodies) = run(Scenario::InvalidSpec, source, healthy_queue(), None).await;
    assert_eq!(action, Action::await_change());
    assert!(bodies.iter().all(|b| b["kind"] != "Deployment" && b["kind"] != "ConfigMap"));
}

#[tokio::test]
async fn a_missing_queue_is_a_condition_and_a_sooner_retry() {
    let (action, _) =
        run(Scenario::QueueMissing, fixtures::source(fixtures::BASIC), Err(QueueError::DoesNotExist), None)
            .await;
    assert_eq!(action, Action::requeue(UNHEALTHY_REQUEUE));
}

#[tokio::test]
async fn a_deleted_source_only_releases_its_finalizer_to_the_garbage_collector() {
    let source = deleting(fixtures::source(fixtures::BASIC));
    let (action, bodies) = run(Scenario::Deletion, source, healthy_queue(), None).await;
    assert_eq!(action, Action::await_change());
    assert_eq!(
        bodies.len(),
        3,
        "the register read and the source's keys withdrawn, the finalizer released: no child, no status, no event"
    );
}

#[tokio::test]
async fn a_new_source_gets_the_finalizer_and_its_children_in_one_reconcile() {
    let source = fixtures::source(fixtures::BASIC);
    let mut expects = vec![
        Expect::Read(Some(serde_json::to_value(&source).unwrap_or_default())),
        Expect::Finalizer { add: true },
    ];
    expects.extend(expectations(&Scenario::Create, None));
    let (action, bodies) = run_expecting(source, healthy_queue(), expects).await;
    assert_eq!(action, Action::requeue(HEALTHY_REQUEUE));
    let patch = &bodies[1];
    assert_eq!(
        patch,
        &json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        "added only if no one added finalizers meanwhile"
    );
}

/// The cache still shows a live source, but the API server no longer has it (deleted while the
/// operator was behind, e.g. after an API server restart), has another object of that name, or
/// has it being deleted: no child is applied, nothing is written, no Warning is published.
#[tokio::test]
async fn a_stale_cache_never_brings_children_back() {
    let cached = held(fixtures::source(fixtures::BASIC));
    let mut replaced = cached.clone();
    replaced.metadata.uid = Some("6f1c2a1e-0000-4000-8000-000000000002".into());
    let answers = [
        ("removed", None),
        ("replaced by a namesake", Some(serde_json::to_value(&replaced).unwrap_or_default())),
        ("being deleted", Some(serde_json::to_value(deleting(cached.clone())).unwrap_or_default())),
    ];
    for (case, answer) in answers {
        let (action, bodies) =
            run_expecting(cached.clone(), healthy_queue(), vec![Expect::Read(answer)]).await;
        assert_eq!(action, Action::await_change(), "{case}");
        assert!(bodies.iter().all(Value::is_null), "{case}: only the read was made");
    }
}

/// The source disappears between the read and the status write: that is the end of it, not a
/// `ReconcileFailed` Warning.
#[tokio::test]
async fn a_source_removed_mid_reconcile_is_not_a_failure() {
    let source = held(fixtures::source(fixtures::BASIC));
    let (ctx, mut handle) = context(healthy_queue());
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut deployment = Value::Null;
        let quiet = Duration::from_millis(500);
        while let Ok(Some((request, send))) = tokio::time::timeout(quiet, handle.next_request()).await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let body = body_json(request).await;
            seen.push(format!("{method} {path} {}", body["reason"].as_str().unwrap_or_default()));
            if method == Method::GET && path.contains("/deployments/") {
                not_found(send);
            } else if query.contains("fieldManager=sluice-scaler") {
                respond(send, &deployment);
            } else if method == Method::GET {
                respond(
                    send,
                    &serde_json::to_value(held(fixtures::source(fixtures::BASIC))).unwrap_or_default(),
                );
            } else if path.ends_with("/status") {
                not_found(send);
            } else {
                if body["kind"] == "Deployment" {
                    deployment = body.clone();
                }
                respond(send, &body);
            }
        }
        seen
    });
    let action = reconcile(Arc::new(DeserializeGuard(Ok(source))), ctx).await;
    assert!(matches!(action, Ok(ref a) if *a == Action::await_change()), "{action:?}");
    let seen = server.await.unwrap_or_default();
    assert!(seen.last().is_some_and(|r| r.ends_with("/status ")), "{seen:#?}");
    assert!(seen.iter().all(|r| !r.contains("ReconcileFailed")), "{seen:#?}");
}

#[tokio::test]
async fn an_object_that_does_not_parse_gets_a_condition() {
    let (ctx, mut handle) = context(healthy_queue());
    let invalid = InvalidObject {
        error: "unknown field `sinkz`".into(),
        metadata: kube::core::ObjectMeta {
            name: Some("orders".into()),
            namespace: Some("shop".into()),
            generation: Some(4),
            ..Default::default()
        },
    };
    let server = tokio::spawn(async move {
        let mut reasons = Vec::new();
        while let Ok(Some((request, send))) = tokio::time::timeout(STEP, handle.next_request()).await {
            let path = request.uri().path().to_owned();
            let body = body_json(request).await;
            if path.ends_with("/status") {
                let ready = body["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Degraded").cloned());
                reasons.push(ready.map(|c| c["reason"].clone()).unwrap_or_default());
                let mut answer = serde_json::to_value(fixtures::source(fixtures::BASIC)).unwrap_or_default();
                answer["status"] = body["status"].clone();
                respond(send, &answer);
                break;
            }
            reasons.push(body["reason"].clone());
            respond(send, &body);
        }
        reasons
    });
    let action = reconcile(Arc::new(DeserializeGuard(Err(invalid))), ctx).await;
    assert!(matches!(action, Ok(ref a) if *a == Action::await_change()), "{action:?}");
    let reasons = server.await.unwrap_or_default();
    assert_eq!(reasons, vec![json!("SpecUnparseable"), json!("SpecUnparseable")]);
}
