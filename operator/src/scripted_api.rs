//! A scripted API server for unit tests (`tower_test`): each test answers the requests it expects,
//! in order, and asserts what was sent.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::Value;

/// The server side of a `tower_test` mock client.
pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// Answers the next request with `status` and `body`; returns its method, path and body.
pub async fn answer(
    handle: &mut std::pin::Pin<&mut Handle>,
    status: StatusCode,
    body: Value,
) -> (Method, String, Value) {
    let (request, send) = handle.next_request().await.expect("a request");
    let (parts, sent) = request.into_parts();
    let bytes = sent.collect_bytes().await.expect("body");
    let sent = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("json") };
    let mut response = Response::new(Body::from(serde_json::to_vec(&body).expect("json")));
    *response.status_mut() = status;
    send.send_response(response);
    (parts.method, parts.uri.path().to_owned(), sent)
}
