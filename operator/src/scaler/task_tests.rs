//! The loop against a fake queue and a scripted API server (`tower_test`): each expected request is
//! asserted (method, path, field manager, body) in order; an unexpected one would hang the tick and
//! fail the timeout.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use sluice_crds::{QueueFigures, QueueRef, SqsSource};
use sluice_protocol::{Incarnation, Lease};

use super::*;
use crate::scaler::reason::Reason;

/// Answers with fixed figures and counts the calls per queue.
struct FakeQueue {
    figures: QueueFigures,
    calls: Mutex<HashMap<String, usize>>,
}

impl FakeQueue {
    fn new(visible: i64, in_flight: i64) -> Arc<Self> {
        let figures = QueueFigures { visible, in_flight, delayed: 0, observed_at: None };
        Arc::new(Self { figures, calls: Mutex::default() })
    }

    fn calls(&self) -> HashMap<String, usize> {
        self.calls.lock().unwrap().clone()
    }
}

impl QueueAttributes for FakeQueue {
    fn figures<'a>(
        &'a self,
        queue: &'a QueueRef,
        _: &'a sluice_crds::Credentials,
    ) -> BoxFuture<'a, Result<QueueFigures, AttributesError>> {
        *self.calls.lock().unwrap().entry(queue.url.clone().unwrap_or_default()).or_default() += 1;
        let figures = self.figures.clone();
        async move { Ok(figures) }.boxed()
    }
}

fn source(scaling: Value) -> SqsSource {
    serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "SqsSource",
        "metadata": { "name": "orders", "namespace": "ns", "uid": "u-1" },
        "spec": {
            "queues": [{ "url": "https://sqs.us-east-1.amazonaws.com/1/a" }, { "url": "https://sqs.us-east-1.amazonaws.com/1/b" }],
            "sinks": [{ "name": "log", "log": {} }],
            "rateLimit": { "messagesPerSecond": 100 },
            "scaling": scaling,
        },
    }))
    .expect("valid SqsSource")
}

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// One request the script expects, and what it answers.
struct Expect {
    method: Method,
    path: &'static str,
    /// Server-side apply under our field manager (asserted from the query).
    applied: bool,
    answer: Answer,
}

enum Answer {
    /// Echo the request body back (what an apply returns, near enough).
    Echo,
    Json(Value),
}

fn apply(path: &'static str) -> Expect {
    Expect { method: Method::PATCH, path, applied: true, answer: Answer::Echo }
}

/// A merge patch by the scaler's field manager (never creates what is gone).
fn merge(path: &'static str) -> Expect {
    Expect { method: Method::PATCH, path, applied: false, answer: Answer::Echo }
}

/// The status apply answers with the whole object, as the API server does.
fn apply_status(source: &SqsSource) -> Expect {
    let answer = Answer::Json(serde_json::to_value(source).unwrap());
    Expect { method: Method::PATCH, path: STATUS, applied: true, answer }
}

/// Serves `script` in order and returns each request's query and body.
async fn serve(handle: Handle, script: Vec<Expect>) -> Vec<(String, Value)> {
    let mut handle = pin!(handle);
    let mut seen = Vec::new();
    for expect in script {
        let (request, send) = handle.next_request().await.expect("a request");
        let (parts, body) = request.into_parts();
        assert_eq!((&parts.method, parts.uri.path()), (&expect.method, expect.path));
        let query = parts.uri.query().unwrap_or_default().to_owned();
        if expect.applied {
            assert!(query.contains("fieldManager=sluice-scaler") && query.contains("force=true"), "{query}");
            assert_eq!(parts.headers["content-type"], "application/apply-patch+yaml");
        } else if parts.method == Method::PATCH {
            assert!(query.contains("fieldManager=sluice-scaler") && !query.contains("force"), "{query}");
            assert_eq!(parts.headers["content-type"], "application/merge-patch+json");
        }
        let bytes = body.collect_bytes().await.expect("body");
        let body: Value =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("json") };
        let response = match expect.answer {
            Answer::Echo => Response::new(Body::from(serde_json::to_vec(&body).unwrap())),
            Answer::Json(value) => Response::new(Body::from(serde_json::to_vec(&value).unwrap())),
        };
        send.send_response(response);
        seen.push((query, body));
    }
    seen
}

fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "orders-reader", "namespace": "ns" },
        "spec": { "replicas": replicas, "selector": {}, "template": {} },
    }))
    .expect("valid Deployment")
}

/// One reader's lease, renewed at `now`, draining `drain_millis` thousandths of a message a second.
fn leases(now: Timestamp, drain_millis: u64) -> Vec<ConfigMap> {
    let mut lease = Lease::new("orders-reader-x", Incarnation(1), now.as_millisecond(), 15);
    lease.drain_millis_per_second = drain_millis;
    let labels = json!({ "sluice.dev/source": "orders", "sluice.dev/checkpoint-role": "lease" });
    vec![
        serde_json::from_value(json!({
            "metadata": { "name": "orders-lease-orders-reader-x", "namespace": "ns", "labels": labels },
            "data": lease.to_data().unwrap(),
        }))
        .expect("valid ConfigMap"),
    ]
}

/// The scaler's context over a scripted API server, with `children` as the watched caches.
fn context(queue: Arc<FakeQueue>, children: Children) -> (Context, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "ns");
    let recorder =
        Recorder::new(client.clone(), Reporter { controller: "sluice-scaler".into(), instance: None });
    let ticks = Arc::new(tokio::sync::Semaphore::new(1));
    (
        Context {
            client,
            queues: queue,
            metrics: Metrics::default(),
            recorder,
            ticks,
            children,
            own_writes: Default::default(),
        },
        handle,
    )
}

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/ns/deployments/orders-reader";
const CHECKPOINT: &str = "/api/v1/namespaces/ns/configmaps/orders-checkpoint";
const STATUS: &str = "/apis/sluice.dev/v1alpha1/namespaces/ns/sqssources/orders/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

async fn run_tick(ctx: &Context, source: &SqsSource, state: &mut SourceState, now: Timestamp) -> Tick {
    tokio::time::timeout(Duration::from_secs(5), tick(ctx, source, state, now))
        .await
        .expect("tick finished: no unexpected request")
        .expect("tick succeeded")
}

#[tokio::test]
async fn burst_scales_up_publishing_replicas_before_the_deployment_grows() {
    let queue = FakeQueue::new(2000, 500);
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let (ctx, handle) = context(queue.clone(), Children::of(vec![deployment(1)], leases(now, 4_000)));
    let source = source(
        json!({ "minReplicas": 0, "maxReplicas": 30, "targetMessagesPerReplica": 1000, "scaleUpMaxStep": 8 }),
    );
    // The Deployment and the leases come from the caches: the first request is a write.
    let script = vec![
        apply(CHECKPOINT),
        merge(DEPLOYMENT),
        apply_status(&source),
        Expect { method: Method::POST, path: EVENTS, applied: false, answer: Answer::Echo },
    ];
    let server = tokio::spawn(serve(handle, script));
    let mut state = SourceState::default();
    let Tick::Decided { current, decision } = run_tick(&ctx, &source, &mut state, now).await else {
        panic!("the deployment exists")
    };
    assert_eq!((current, decision.desired, decision.recommended), (1, 9, 21));
    let seen = server.await.unwrap();

    assert_eq!(seen[0].1["data"], json!({ "replicas": "9" }));
    assert_eq!(seen[0].1["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(seen[1].1, json!({ "spec": { "replicas": 9 } }));
    let status = &seen[2].1["status"];
    assert_eq!(status["desiredReplicas"], 9);
    assert_eq!(status["queue"]["visible"], 4000, "summed over both queues");
    assert_eq!(status["queue"]["inFlight"], 1000);
    assert_eq!(status["rates"]["drainPerSecond"], 4.0, "from the cached lease");
    assert_eq!(status["lastScaleTime"], now.to_string());
    assert!(
        status["lastScaleReason"].as_str().unwrap().starts_with("backlog 5000 needs 21 replicas"),
        "{status}"
    );
    assert_eq!(seen[3].1["reason"], "ScaledUp");
    assert_eq!(seen[3].1["regarding"]["name"], "orders");
    assert_eq!(
        seen[3].1["note"],
        "1 -> 9 replicas: backlog 5000 needs 21 replicas (readers drain 4.0 msg/s each, too slow to clear it within 60s); limited by scaleUpMaxStep"
    );
    assert_eq!(queue.calls().values().collect::<Vec<_>>(), [&1, &1], "one call per queue per interval");
}

#[tokio::test]
async fn a_steady_interval_reads_and_writes_nothing_new() {
    let queue = FakeQueue::new(150, 0);
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let later = Timestamp::from_second(1_800_000_005).unwrap();
    let (ctx, handle) = context(queue.clone(), Children::of(vec![deployment(3)], leases(now, 0)));
    let source = source(json!({}));
    // First interval: the readers learn the count, and the status is written once; the second
    // makes no request at all.
    let script = vec![apply(CHECKPOINT), apply_status(&source)];
    let server = tokio::spawn(serve(handle, script));
    let mut state = SourceState::default();
    for at in [now, later] {
        let Tick::Decided { current, decision } = run_tick(&ctx, &source, &mut state, at).await else {
            panic!("the deployment exists")
        };
        assert_eq!((current, decision.desired), (3, 3));
        assert_eq!(decision.reason, Reason::Steady { backlog: 300, recommended: 3 });
    }
    let seen = server.await.unwrap();
    assert_eq!(seen[0].1["data"], json!({ "replicas": "3" }));
    assert!(seen[1].1["status"].get("lastScaleTime").is_none());
    assert_eq!(queue.calls().values().collect::<Vec<_>>(), [&2, &2]);
}

#[tokio::test]
async fn idle_source_scales_to_zero_shrinking_the_deployment_first() {
    let queue = FakeQueue::new(0, 0);
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let at = Timestamp::from_second(1_800_000_060).unwrap();
    let (ctx, handle) = context(queue, Children::of(vec![deployment(3)], leases(at, 0)));
    let source = source(json!({ "minReplicas": 0, "idleCooldownSeconds": 60 }));
    let mut state = SourceState { history: Some(History::starting_at(now, 3)), ..SourceState::default() };
    let script = vec![
        merge(DEPLOYMENT),
        apply(CHECKPOINT),
        apply_status(&source),
        Expect { method: Method::POST, path: EVENTS, applied: false, answer: Answer::Echo },
    ];
    let server = tokio::spawn(serve(handle, script));
    let Tick::Decided { decision, .. } = run_tick(&ctx, &source, &mut state, at).await else {
        panic!("the deployment exists")
    };
    assert_eq!(decision.reason, Reason::ScaledToZero { idle_seconds: 60 });
    let seen = server.await.unwrap();
    assert_eq!(seen[0].1["spec"], json!({ "replicas": 0 }));
    assert_eq!(seen[1].1["data"], json!({ "replicas": "0" }));
    assert_eq!(seen[3].1["reason"], "ScaledToZero");
}

#[tokio::test]
async fn nothing_is_read_or_written_before_the_reconciler_creates_the_deployment() {
    let queue = FakeQueue::new(5000, 0);
    let (ctx, handle) = context(queue.clone(), Children::of(Vec::new(), Vec::new()));
    let source = source(json!({}));
    // No request is served: one would fail the tick.
    drop(handle);
    let mut state = SourceState::default();
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    assert_eq!(run_tick(&ctx, &source, &mut state, now).await, Tick::NoDeployment);
    assert!(queue.calls().is_empty(), "no queue read for a source without readers");
}

/// The writes of a steady source's first interval (the readers' count, the status).
fn first_interval_writes(source: &SqsSource) -> Vec<Expect> {
    vec![apply(CHECKPOINT), apply_status(source)]
}

#[tokio::test]
async fn the_loop_polls_each_interval_and_ends_with_its_source() {
    let queue = FakeQueue::new(10, 0);
    let (ctx, handle) = context(queue.clone(), Children::of(vec![deployment(1)], Vec::new()));
    let source = source(json!({ "pollIntervalSeconds": 1 }));
    let (store, mut writer) = crate::source_cache::SourceCache::by_hand();
    writer(kube::runtime::watcher::Event::Apply(source.clone()));
    let server = tokio::spawn(serve(handle, first_interval_writes(&source)));
    let started = tokio::time::Instant::now();
    let looping =
        tokio::spawn(run_source(ctx, store, ObjectRef::from_obj(&source), CancellationToken::new()));

    let polled_twice = async {
        // Both queues, twice each.
        while queue.calls().values().filter(|&&calls| calls >= 2).count() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), polled_twice).await.expect("a second interval");
    assert!(started.elapsed() >= Duration::from_secs(1), "two polls are an interval apart");
    server.await.unwrap();
    writer(kube::runtime::watcher::Event::Delete(source));
    tokio::time::timeout(Duration::from_secs(3), looping).await.expect("the loop ended").unwrap();
}

#[tokio::test]
async fn shutdown_interrupts_the_wait_between_polls() {
    let (ctx, handle) = context(FakeQueue::new(10, 0), Children::of(vec![deployment(1)], Vec::new()));
    let source = source(json!({ "pollIntervalSeconds": 300 }));
    let (store, mut writer) = crate::source_cache::SourceCache::by_hand();
    writer(kube::runtime::watcher::Event::Apply(source.clone()));
    let server = tokio::spawn(serve(handle, first_interval_writes(&source)));
    let shutdown = CancellationToken::new();
    let looping = tokio::spawn(run_source(ctx, store, ObjectRef::from_obj(&source), shutdown.clone()));
    server.await.unwrap();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(3), looping).await.expect("the loop ended").unwrap();
}
