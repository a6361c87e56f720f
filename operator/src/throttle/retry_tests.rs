use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use prometheus_client::registry::Registry;
use tower::retry::RetryLayer;
use tower::{Service, ServiceExt as _};
use tower_test::mock;

use super::*;

fn answer(code: StatusCode, retry_after: Option<&str>) -> Response<Body> {
    let mut builder = Response::builder().status(code);
    if let Some(seconds) = retry_after {
        builder = builder.header("Retry-After", seconds);
    }
    builder.body(Body::empty()).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_429_waits_for_its_retry_after_then_succeeds_and_is_counted() {
    let mut registry = Registry::default();
    let metrics = ThrottleMetrics::register(&mut registry);
    let throttle = ApiThrottle::new(metrics.clone());
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut service = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(ObservedRetry::new(throttle.clone())))
        .service(service);
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.unwrap_or_else(|| panic!("no request"));
        assert_eq!(request.method(), Method::PUT);
        let first = tokio::time::Instant::now();
        send.send_response(answer(StatusCode::TOO_MANY_REQUESTS, Some("1")));
        let (retried, send) = handle.next_request().await.unwrap_or_else(|| panic!("no retry"));
        assert_eq!(retried.uri().path(), "/api/v1/namespaces/a/configmaps/b");
        assert!(first.elapsed() >= Duration::from_secs(1), "retried after {:?}", first.elapsed());
        send.send_response(answer(StatusCode::OK, None));
    });
    let request = Request::builder()
        .method(Method::PUT)
        .uri("/api/v1/namespaces/a/configmaps/b")
        .body(Body::from(b"{}".to_vec()))
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = service.ready().await.unwrap_or_else(|e| panic!("{e}"));
    let response = ready.call(request).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), StatusCode::OK);
    assert!(server.await.is_ok());
    assert_eq!(metrics.responses.get(), 1);
    assert!(metrics.waited_seconds.get() >= 0.9, "{}", metrics.waited_seconds.get());
    assert_eq!(metrics.throttled.get(), 1);
    assert!(throttle.tick(), "the episode lasts until 10 s after the retry");
    let mut text = String::new();
    assert!(prometheus_client::encoding::text::encode(&mut text, &registry).is_ok());
    assert!(text.contains("sluice_operator_api_throttled_responses_total 1"), "{text}");
}
