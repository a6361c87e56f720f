use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/sluice-operator";

fn elector() -> (Elector, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let api = Api::namespaced(Client::new(service, "ops"), "ops");
    (Elector::new(api, "sluice-operator", "pod-a", LeaseTimings::default()), handle)
}

async fn next(handle: &mut Handle) -> (Method, String, Value, mock::SendResponse<Response<Body>>) {
    let got = tokio::time::timeout(Duration::from_secs(5), handle.next_request()).await;
    let Ok(Some((request, send))) = got else { panic!("no request") };
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
    (method, path, serde_json::from_slice(&bytes).unwrap_or(Value::Null), send)
}

fn reply(send: mock::SendResponse<Response<Body>>, code: StatusCode, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    match Response::builder().status(code).body(Body::from(bytes)) {
        Ok(r) => send.send_response(r),
        Err(e) => panic!("{e}"),
    }
}

fn lease(holder: &str, renewed: Timestamp) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "sluice-operator", "namespace": "ops", "resourceVersion": "7"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed.to_string(), "leaseTransitions": 2}
    })
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason})
}

#[tokio::test]
async fn an_absent_lease_is_created() {
    let (elector, mut handle) = elector();
    let server = tokio::spawn(async move {
        let (m, p, _, send) = next(&mut handle).await;
        assert_eq!((m, p.as_str()), (Method::GET, PATH));
        reply(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
        let (m, p, body, send) = next(&mut handle).await;
        assert_eq!((m, p.as_str()), (Method::POST, "/apis/coordination.k8s.io/v1/namespaces/ops/leases"));
        assert_eq!(body["spec"]["holderIdentity"], "pod-a");
        assert_eq!(body["spec"]["leaseTransitions"], 0);
        reply(send, StatusCode::CREATED, &body);
    });
    assert!(matches!(elector.try_once().await, Ok(true)));
    assert!(server.await.is_ok());
}

#[tokio::test]
async fn a_live_lease_of_another_replica_is_left_alone() {
    let (elector, mut handle) = elector();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::OK, &lease("pod-b", Timestamp::now()));
        let extra = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
        assert!(!matches!(extra, Ok(Some(_))), "no write while another replica leads");
    });
    assert!(matches!(elector.try_once().await, Ok(false)));
    assert!(server.await.is_ok());
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_compare_and_swap() {
    let (elector, mut handle) = elector();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::OK, &lease("pod-b", Timestamp::UNIX_EPOCH));
        let (m, p, body, send) = next(&mut handle).await;
        assert_eq!((m, p.as_str()), (Method::PUT, PATH));
        assert_eq!(body["metadata"]["resourceVersion"], "7", "the write must carry the read's version");
        assert_eq!(body["spec"]["holderIdentity"], "pod-a");
        assert_eq!(body["spec"]["leaseTransitions"], 3);
        reply(send, StatusCode::OK, &body);
    });
    assert!(matches!(elector.try_once().await, Ok(true)));
    assert!(server.await.is_ok());
}

#[tokio::test]
async fn losing_the_race_means_standing_by() {
    let (elector, mut handle) = elector();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::OK, &lease("pod-b", Timestamp::UNIX_EPOCH));
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::CONFLICT, &status(409, "Conflict"));
    });
    assert!(matches!(elector.try_once().await, Ok(false)));
    assert!(server.await.is_ok());
}

#[tokio::test]
async fn the_holder_renews_and_releases() {
    let (elector, mut handle) = elector();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::OK, &lease("pod-a", Timestamp::now()));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PUT);
        assert_eq!(body["spec"]["leaseTransitions"], 2, "a renewal is not a transition");
        reply(send, StatusCode::OK, &body);
        // release
        let (_, _, _, send) = next(&mut handle).await;
        reply(send, StatusCode::OK, &lease("pod-a", Timestamp::now()));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PUT);
        assert!(body["spec"].get("holderIdentity").is_none_or(Value::is_null));
        reply(send, StatusCode::OK, &body);
    });
    assert!(matches!(elector.try_once().await, Ok(true)));
    elector.release().await;
    assert!(server.await.is_ok());
}

#[tokio::test]
async fn a_renewal_that_hangs_ends_leadership_at_the_renew_deadline() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let api = Api::namespaced(Client::new(service, "ops"), "ops");
    let timings = LeaseTimings {
        duration: Duration::from_secs(3),
        renew_deadline: Duration::from_millis(300),
        retry: Duration::from_millis(50),
    };
    let elector = Elector::new(api, "sluice-operator", "pod-a", timings);
    // The API server takes the renewal's GET and never answers (a throttled or stuck request).
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some(pending) = handle.next_request().await {
            held.push(pending);
        }
    });
    let started = tokio::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(2), elector.hold()).await;
    assert!(ended.is_ok(), "hold() must give up at the renew deadline, not wait for the API server");
    assert!(started.elapsed() >= Duration::from_millis(300), "not before it: {:?}", started.elapsed());
    server.abort();
}
