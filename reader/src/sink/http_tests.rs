//! The http sink against a real HTTP server on loopback: what it sends, when it retries, when it
//! gives up, and that it never has more requests in flight than `concurrency`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sluice_crds::{HttpSinkSpec, RetrySpec, RetryStrategy};

use super::http::HttpSink;
use super::retry::RetryPolicy;
use super::testing::record;
use super::{Outcome, Sink};
use crate::record::Record;

/// How the test server answers the n-th request (0-based) for one `ce-id`.
type Script = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

#[derive(Clone)]
pub(super) enum Reply {
    Status(u16),
    StatusRetryAfter(u16, &'static str),
    SlowOk(Duration),
}

#[derive(Clone)]
pub(super) struct Server {
    script: Script,
    pub(super) seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    pub(super) hits: Arc<Mutex<HashMap<String, usize>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

async fn handle(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> Response {
    let now = server.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    server.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let id = headers.get("ce-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let n = {
        let mut hits = server.hits.lock().unwrap();
        let n = hits.entry(id).or_default();
        *n += 1;
        *n - 1
    };
    server.seen.lock().unwrap().push((headers, body));
    let reply = (server.script)(n);
    let response = match reply {
        Reply::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Reply::StatusRetryAfter(code, after) => {
            (StatusCode::from_u16(code).unwrap(), [("retry-after", after)], "busy").into_response()
        }
        Reply::SlowOk(delay) => {
            tokio::time::sleep(delay).await;
            StatusCode::OK.into_response()
        }
    };
    server.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

/// Serve `script` on 127.0.0.1:0; returns the server's state and URL.
pub(super) async fn serve(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> (Server, String) {
    let server = Server {
        script: Arc::new(script),
        seen: Arc::default(),
        hits: Arc::default(),
        in_flight: Arc::default(),
        max_in_flight: Arc::default(),
    };
    let app = Router::new().route("/events", axum::routing::post(handle)).with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (server, url)
}

pub(super) fn sink(url: &str, timeout_ms: u64, concurrency: u32, max_attempts: u32) -> HttpSink {
    let spec = HttpSinkSpec {
        url: url.into(),
        timeout_ms,
        concurrency,
        headers: [("x-tenant".to_string(), "blue".to_string())].into(),
        event_type: "dev.sluice.test".into(),
        secret_refs: None,
        batch: None,
    };
    let retry = RetrySpec {
        strategy: RetryStrategy::Exponential,
        max_attempts,
        initial_delay_ms: 10,
        max_delay_ms: 100,
        max_elapsed_seconds: 10,
        jitter: true,
        ..RetrySpec::default()
    };
    HttpSink::new("web", &spec, RetryPolicy::from_spec(&retry)).unwrap()
}

fn records(n: usize) -> Vec<Arc<Record>> {
    (0..n).map(|i| Arc::new(record(&format!("msg-{i}")))).collect()
}

/// Every test is bounded: a hung sink fails the test instead of hanging the suite.
pub(super) async fn deliver(sink: &HttpSink, records: &[Arc<Record>]) -> Vec<Outcome> {
    tokio::time::timeout(Duration::from_secs(20), sink.deliver(records)).await.expect("deliver hung")
}

#[tokio::test]
async fn success_sends_a_binary_mode_cloudevent() {
    let (server, url) = serve(|_| Reply::Status(202)).await;
    let sink = sink(&url, 2_000, 4, 3);
    let mut r = record("msg-1");
    r.message_attributes.insert("Trace-Id".into(), "t-1".into());
    assert_eq!(deliver(&sink, &[Arc::new(r)]).await, vec![Outcome::Delivered]);
    let seen = server.seen.lock().unwrap();
    let (headers, body) = &seen[0];
    let h = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h("ce-specversion"), "1.0");
    assert_eq!(h("ce-id"), "msg-1");
    assert_eq!(h("ce-type"), "dev.sluice.test");
    assert_eq!(h("ce-source"), "http://127.0.0.1:4566/queue/us-east-1/000000000000/source");
    assert_eq!(h("ce-time"), "2023-11-14T22:13:20Z");
    assert_eq!(h("idempotency-key"), "msg-1");
    assert_eq!(h("ce-sqstraceid"), "t-1");
    assert_eq!(h("content-type"), "application/octet-stream");
    assert_eq!(h("x-tenant"), "blue");
    assert_eq!(body.as_ref(), b"body-msg-1");
    let stats = sink.stats().unwrap();
    assert_eq!((stats.requests(), stats.retries()), (1, 0));
}

#[tokio::test]
async fn a_503_is_retried_then_delivered_and_the_retry_counted() {
    let (server, url) =
        serve(|n| if n == 0 { Reply::StatusRetryAfter(503, "0") } else { Reply::Status(200) }).await;
    let sink = sink(&url, 2_000, 4, 3);
    let outcomes = deliver(&sink, &records(5)).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 5]);
    assert_eq!(sink.stats().unwrap().retries(), 5);
    assert_eq!(sink.stats().unwrap().requests(), 10);
    assert!(server.hits.lock().unwrap().values().all(|n| *n == 2));
}

#[tokio::test]
async fn a_400_is_rejected_at_once_with_the_status_in_the_reason() {
    let (server, url) = serve(|_| Reply::Status(400)).await;
    let sink = sink(&url, 2_000, 4, 5);
    let outcomes = deliver(&sink, &records(1)).await;
    let [Outcome::Rejected { reason }] = outcomes.as_slice() else { panic!("{outcomes:?}") };
    assert!(reason.contains("400"), "{reason}");
    assert_eq!(server.seen.lock().unwrap().len(), 1, "no retry on a 400");
    assert_eq!(sink.stats().unwrap().retries(), 0);
}

#[tokio::test]
async fn transient_errors_fail_once_attempts_run_out() {
    let (server, url) = serve(|_| Reply::Status(500)).await;
    let sink = sink(&url, 2_000, 4, 3);
    let outcomes = deliver(&sink, &records(1)).await;
    let [Outcome::Failed { reason }] = outcomes.as_slice() else { panic!("{outcomes:?}") };
    assert!(reason.contains("500") && reason.contains("3 attempts"), "{reason}");
    assert_eq!(server.seen.lock().unwrap().len(), 3);
    assert_eq!(sink.stats().unwrap().retries(), 2);
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let (server, url) =
        serve(|n| if n == 0 { Reply::SlowOk(Duration::from_millis(1_500)) } else { Reply::Status(200) })
            .await;
    let sink = sink(&url, 200, 4, 3);
    assert_eq!(deliver(&sink, &records(2)).await, vec![Outcome::Delivered; 2]);
    assert_eq!(sink.stats().unwrap().retries(), 2);
    assert!(server.hits.lock().unwrap().values().all(|n| *n == 2));
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let sink = sink(&format!("http://127.0.0.1:{port}/events"), 500, 1, 2);
    let outcomes = deliver(&sink, &records(1)).await;
    assert!(matches!(&outcomes[..], [Outcome::Failed { .. }]), "{outcomes:?}");
    assert_eq!(sink.stats().unwrap().retries(), 1);
}

#[tokio::test]
async fn retry_after_is_honoured_but_bounded_by_max_delay() {
    // Retry-After: 30 s, max delay 100 ms: the retry comes after 100 ms, not 30 s.
    let (_, url) =
        serve(|n| if n == 0 { Reply::StatusRetryAfter(429, "30") } else { Reply::Status(200) }).await;
    let sink = sink(&url, 2_000, 1, 2);
    let started = std::time::Instant::now();
    assert_eq!(deliver(&sink, &records(1)).await, vec![Outcome::Delivered]);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(started.elapsed() >= Duration::from_millis(100), "{:?}", started.elapsed());
}

#[tokio::test]
async fn concurrency_is_capped_across_deliver_calls() {
    let (server, url) = serve(|_| Reply::SlowOk(Duration::from_millis(50))).await;
    let sink = Arc::new(sink(&url, 2_000, 3, 1));
    let (a, b) = (records(8), records(8));
    let (x, y) = tokio::join!(deliver(&sink, &a), deliver(&sink, &b));
    assert!(x.iter().chain(&y).all(|o| *o == Outcome::Delivered));
    assert_eq!(server.seen.lock().unwrap().len(), 16);
    assert_eq!(server.max_in_flight.load(Ordering::SeqCst), 3, "the cap is reached and never exceeded");
}

#[tokio::test]
async fn an_http_dead_letter_carries_the_reason_as_extension_headers() {
    let (server, url) = serve(|_| Reply::Status(200)).await;
    let dead_letter = super::DeadLetter::new(Arc::new(sink(&url, 2_000, 1, 1)));
    let rejected = vec![(Arc::new(record("poison")), "HTTP 400 Bad Request".to_string())];
    assert_eq!(dead_letter.send(&rejected).await, vec![Outcome::Delivered]);
    let seen = server.seen.lock().unwrap();
    let h = |name: &str| seen[0].0.get(name).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h("ce-id"), "poison");
    assert_eq!(h("ce-sluicedlqreason"), "HTTP%20400%20Bad%20Request");
    assert_eq!(h("ce-sluicesourcemessageid"), "poison");
    assert_eq!(h("ce-sluicesourcequeue"), "http://127.0.0.1:4566/queue/us-east-1/000000000000/source");
}

#[tokio::test]
async fn secret_headers_are_read_from_the_mounted_files() {
    let (server, url) = serve(|_| Reply::Status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sink-auth")).unwrap();
    std::fs::write(dir.path().join("sink-auth/token"), "Bearer from-a-secret\n").unwrap();
    let spec = HttpSinkSpec {
        url,
        timeout_ms: 2_000,
        concurrency: 1,
        headers: Default::default(),
        event_type: "dev.sluice.test".into(),
        secret_refs: Some(sluice_crds::HttpSecretRefs {
            headers: vec![sluice_crds::SecretHeader {
                name: "Authorization".into(),
                secret_key_ref: sluice_crds::SecretKeyRef { name: "sink-auth".into(), key: "token".into() },
            }],
            ca_bundle: None,
        }),
        batch: None,
    };
    let policy = RetryPolicy::from_spec(&RetrySpec::default());
    let sink = HttpSink::with_secrets_in("web", &spec, policy, dir.path()).unwrap();
    assert_eq!(deliver(&sink, &records(1)).await, vec![Outcome::Delivered]);
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen[0].0.get("authorization").unwrap(), "Bearer from-a-secret");
}
