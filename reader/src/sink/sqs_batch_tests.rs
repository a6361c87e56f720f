//! Partial SendMessageBatch failures, which LocalStack does not produce on demand: a fake SQS on
//! loopback answers one batch with a success, a receiver fault and a sender fault, and the sink
//! must retry only the receiver fault and reject only the sender fault.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::config::retry::RetryConfig;
use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use sluice_crds::RetrySpec;

use super::retry::RetryPolicy;
use super::sqs::SqsSink;
use super::testing::record;
use super::{Outcome, Sink};

/// Entry ids of each SendMessageBatch the fake received.
type Calls = Arc<Mutex<Vec<Vec<String>>>>;

async fn send_message_batch(State(calls): State<Calls>, body: String) -> impl IntoResponse {
    let request: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<String> =
        request["Entries"].as_array().unwrap().iter().map(|e| e["Id"].as_str().unwrap().to_owned()).collect();
    let first_call = {
        let mut calls = calls.lock().unwrap();
        calls.push(ids.clone());
        calls.len() == 1
    };
    let ok = |id: &str| json!({"Id": id, "MessageId": format!("fwd-{id}"), "MD5OfMessageBody": "0"});
    let answer = if first_call {
        json!({
            "Successful": [ok("0")],
            "Failed": [
                {"Id": "1", "SenderFault": false, "Code": "InternalError", "Message": "try again"},
                {"Id": "2", "SenderFault": true, "Code": "InvalidParameterValue", "Message": "bad attribute"},
            ],
        })
    } else {
        json!({"Successful": ids.iter().map(|id| ok(id)).collect::<Vec<_>>(), "Failed": []})
    };
    ([("content-type", "application/x-amz-json-1.0")], answer.to_string())
}

#[tokio::test]
async fn only_receiver_faults_are_retried_and_only_sender_faults_rejected() {
    let calls: Calls = Arc::default();
    let app = Router::new().route("/", axum::routing::post(send_message_batch)).with_state(calls.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let aws = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "fake"))
        .endpoint_url(&endpoint)
        .load()
        .await;
    let client = Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&aws).retry_config(RetryConfig::disabled()).build(),
    );
    let retry = RetrySpec { max_attempts: 3, initial_delay_ms: 10, max_delay_ms: 50, ..RetrySpec::default() };
    let queue_url = format!("{endpoint}/000000000000/target");
    let sink = SqsSink::with_client("forward", client, &queue_url, None, RetryPolicy::from_spec(&retry));

    let records: Vec<_> = ["a", "b", "c"].iter().map(|id| Arc::new(record(id))).collect();
    let outcomes = tokio::time::timeout(Duration::from_secs(20), sink.deliver(&records)).await.unwrap();
    assert_eq!(outcomes[0], Outcome::Delivered);
    assert_eq!(outcomes[1], Outcome::Delivered, "the receiver fault was retried");
    let Outcome::Rejected { reason } = &outcomes[2] else { panic!("{outcomes:?}") };
    assert!(reason.contains("InvalidParameterValue"), "{reason}");
    assert_eq!(*calls.lock().unwrap(), vec![vec!["0", "1", "2"], vec!["1"]]);
    assert_eq!(sink.stats().unwrap().retries(), 1);
}
