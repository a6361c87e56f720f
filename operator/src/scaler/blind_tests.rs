//! The `Fallback` condition's write against a scripted API server (`tower_test`).

use std::pin::pin;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::scripted_api::answer;

const SOURCE: &str = "/apis/sluice.dev/v1alpha1/namespaces/ns/sqssources/orders";

fn condition(type_: &str, status: &str) -> Value {
    json!({ "type": type_, "status": status, "reason": "R", "message": "m", "lastTransitionTime": "2026-12-06T00:00:00Z" })
}

fn source(conditions: Vec<Value>) -> SqsSource {
    serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "SqsSource",
        "metadata": { "name": "orders", "namespace": "ns", "uid": "u-1", "generation": 1 },
        "spec": {
            "queues": [{ "url": "https://sqs.us-east-1.amazonaws.com/1/a" }],
            "sinks": [{ "name": "log", "log": {} }],
        },
        "status": { "conditions": conditions },
    }))
    .expect("valid SqsSource")
}

#[tokio::test]
async fn a_patch_made_from_a_stale_copy_is_made_again_from_a_fresh_read_once() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let sources: Api<SqsSource> = Api::namespaced(Client::new(service, "ns"), "ns");
    // The watched copy has Fallback at index 1; on the server a condition was added before it.
    let watched = source(vec![condition("Ready", "True"), condition(FALLBACK, "True")]);
    let fresh = source(vec![
        condition("Ready", "True"),
        condition("SinksHealthy", "True"),
        condition(FALLBACK, "True"),
    ]);
    let verdict = Verdict { status: "False", reason: "QueueReadable", message: "the queue is read".into() };
    let watched_conditions = watched.status.clone().map(|s| s.conditions).unwrap_or_default();
    let server = tokio::spawn({
        let fresh = serde_json::to_value(&fresh).expect("json");
        async move {
            let mut handle = pin!(handle);
            let refused = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
                "message": "the test operation failed", "code": 422 });
            let first = answer(&mut handle, StatusCode::UNPROCESSABLE_ENTITY, refused).await;
            let read = answer(&mut handle, StatusCode::OK, fresh.clone()).await;
            let second = answer(&mut handle, StatusCode::OK, fresh).await;
            (first, read, second)
        }
    });
    let written = write_fallback(&sources, &watched, &watched_conditions, &verdict);
    tokio::time::timeout(Duration::from_secs(5), written)
        .await
        .expect("no unexpected request")
        .expect("written");
    let (first, read, second) = server.await.expect("server");
    assert_eq!((&first.0, first.1.as_str()), (&Method::PATCH, &*format!("{SOURCE}/status")));
    assert_eq!(first.2[0]["path"], "/status/conditions/1/type", "first from the watched copy");
    assert_eq!((&read.0, read.1.as_str()), (&Method::GET, SOURCE));
    assert_eq!(second.2[0]["path"], "/status/conditions/2/type", "then from the fresh read");
    assert_eq!(second.2[1]["value"]["reason"], "QueueReadable");
}

#[tokio::test]
async fn a_condition_already_there_is_not_written() {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let sources: Api<SqsSource> = Api::namespaced(Client::new(service, "ns"), "ns");
    let verdict = Verdict { status: "True", reason: "R", message: "m".into() };
    let watched = source(vec![condition("Ready", "True"), condition(FALLBACK, "True")]);
    let conditions = watched.status.clone().map(|s| s.conditions).unwrap_or_default();
    let written = write_fallback(&sources, &watched, &conditions, &verdict);
    tokio::time::timeout(Duration::from_secs(5), written)
        .await
        .expect("no request")
        .expect("nothing to write");
}
