//! The batch mode against a real HTTP server on loopback: how events gather into batches, and
//! what each answer does to each event (delivered once, retried, rejected with the receiver's
//! reason, held).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sluice_crds::{HttpBatchSpec, HttpSinkSpec, RetrySpec, RetryStrategy};

use super::*;
use crate::process::batch_stats::ItemFailure;
use crate::sink::retry::RetryPolicy;
use crate::sink::testing::record;

/// What the server answers to a batch, given its event ids.
type Script = Arc<dyn Fn(&[String]) -> (u16, String) + Send + Sync>;

/// One request as the server saw it: its content type and event ids.
type Batch = (String, Vec<String>);

#[derive(Clone)]
struct Receiver {
    script: Script,
    /// Every batch: its content type and event ids.
    batches: Arc<Mutex<Vec<Batch>>>,
}

impl Receiver {
    fn hits(&self) -> HashMap<String, usize> {
        let mut hits = HashMap::new();
        for (_, ids) in self.batches.lock().unwrap().iter() {
            for id in ids {
                *hits.entry(id.clone()).or_default() += 1;
            }
        }
        hits
    }
}

async fn handle(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let events: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array of events");
    let ids: Vec<String> = events.iter().map(|e| e["id"].as_str().unwrap().to_owned()).collect();
    let content_type = headers.get("content-type").unwrap().to_str().unwrap().to_owned();
    receiver.batches.lock().unwrap().push((content_type, ids.clone()));
    let (status, answer) = (receiver.script)(&ids);
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/json")], answer).into_response()
}

async fn serve(script: impl Fn(&[String]) -> (u16, String) + Send + Sync + 'static) -> (Receiver, String) {
    let receiver = Receiver { script: Arc::new(script), batches: Arc::default() };
    let app = Router::new().route("/batch", axum::routing::post(handle)).with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/batch", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (receiver, url)
}

fn sink(url: &str, batch: HttpBatchSpec, max_attempts: u32) -> HttpBatchSink {
    let spec = HttpSinkSpec {
        url: url.into(),
        timeout_ms: 2_000,
        concurrency: 4,
        headers: Default::default(),
        event_type: "dev.sluice.test".into(),
        secret_refs: None,
        batch: Some(batch.clone()),
    };
    let retry = RetrySpec {
        strategy: RetryStrategy::Fixed,
        max_attempts,
        initial_delay_ms: 10,
        max_delay_ms: 10,
        max_elapsed_seconds: 10,
        jitter: false,
        ..RetrySpec::default()
    };
    let http = HttpSink::new("batched", &spec, RetryPolicy::from_spec(&retry)).unwrap();
    HttpBatchSink::new(http, &batch).unwrap()
}

fn records(n: usize) -> Vec<Arc<Record>> {
    (0..n).map(|i| Arc::new(record(&format!("m-{i:02}")))).collect()
}

/// Bounded: a hung sink fails the test.
async fn deliver(sink: &HttpBatchSink, records: &[Arc<Record>]) -> Vec<Outcome> {
    tokio::time::timeout(Duration::from_secs(20), sink.deliver(records)).await.expect("deliver hung")
}

fn all_ok(_: &[String]) -> (u16, String) {
    (200, String::new())
}

#[tokio::test]
async fn records_gather_into_batches_of_at_most_max_events_each_sent_once() {
    let (receiver, url) = serve(all_ok).await;
    let spec = HttpBatchSpec { max_events: 10, max_wait_milliseconds: 200, ..HttpBatchSpec::default() };
    let sink = sink(&url, spec, 3);
    let outcomes = deliver(&sink, &records(25)).await;
    assert!(outcomes.iter().all(|o| *o == Outcome::Delivered), "{outcomes:?}");
    let batches = receiver.batches.lock().unwrap().clone();
    let sizes: Vec<usize> = batches.iter().map(|(_, ids)| ids.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 25);
    assert!(sizes.iter().all(|&n| n <= 10), "{sizes:?}");
    assert_eq!(sizes.len(), 3, "25 events at once fill 10 + 10 + 5: {sizes:?}");
    assert!(batches.iter().all(|(ct, _)| ct == "application/cloudevents-batch+json"));
    assert!(receiver.hits().values().all(|&n| n == 1));
    let stats = sink.stats().unwrap();
    assert_eq!((stats.batches.requests(), stats.requests(), stats.retries()), (3, 3, 0));
}

#[tokio::test]
async fn an_event_larger_than_max_bytes_goes_alone() {
    let (receiver, url) = serve(all_ok).await;
    let spec = HttpBatchSpec { max_events: 100, max_bytes: 2048, max_wait_milliseconds: 100 };
    let sink = sink(&url, spec, 1);
    let mut big = record("big");
    big.body = Bytes::from(vec![b'x'; 3000]);
    let mut all = records(3);
    all.insert(1, Arc::new(big));
    assert!(deliver(&sink, &all).await.iter().all(|o| *o == Outcome::Delivered));
    let batches = receiver.batches.lock().unwrap().clone();
    let alone = batches.iter().find(|(_, ids)| ids.contains(&"big".to_owned())).unwrap();
    assert_eq!(alone.1, vec!["big".to_owned()]);
    assert_eq!(receiver.hits().len(), 4);
}

#[tokio::test]
async fn named_failures_are_retried_then_rejected_with_the_reason_and_the_rest_never_resent() {
    let failing = |id: &str| id.ends_with('3') || id.ends_with('7');
    let (receiver, url) = serve(move |ids| {
        let items: Vec<String> = ids
            .iter()
            .filter(|id| failing(id))
            .map(|id| format!(r#"{{"itemIdentifier":"{id}","reason":"no price for {id}"}}"#))
            .collect();
        (200, format!(r#"{{"batchItemFailures":[{}]}}"#, items.join(",")))
    })
    .await;
    let sink = sink(&url, HttpBatchSpec::default(), 3);
    let all = records(10);
    let outcomes = deliver(&sink, &all).await;
    for (r, outcome) in all.iter().zip(&outcomes) {
        if failing(&r.message_id) {
            let Outcome::Rejected { reason } = outcome else { panic!("{}: {outcome:?}", r.message_id) };
            assert!(reason.contains(&format!("no price for {}", r.message_id)), "{reason}");
            assert!(reason.ends_with("(gave up after 3 attempts)"), "{reason}");
        } else {
            assert_eq!(*outcome, Outcome::Delivered, "{}", r.message_id);
        }
    }
    let hits = receiver.hits();
    for r in &all {
        assert_eq!(hits[&r.message_id], if failing(&r.message_id) { 3 } else { 1 }, "{}", r.message_id);
    }
    let stats = sink.stats().unwrap();
    assert_eq!(stats.batches.failed(ItemFailure::Receiver), 6, "2 events failed in 3 batches");
}

#[tokio::test]
async fn a_whole_batch_5xx_is_held_and_a_4xx_rejected() {
    let (receiver, url) = serve(|_| (503, "down".into())).await;
    let outcomes = deliver(&sink(&url, HttpBatchSpec::default(), 2), &records(4)).await;
    for outcome in &outcomes {
        let Outcome::Failed { reason } = outcome else { panic!("{outcome:?}") };
        assert!(reason.contains("HTTP 503") && reason.ends_with("(gave up after 2 attempts)"), "{reason}");
    }
    assert!(receiver.hits().values().all(|&n| n == 2));
    let (_, url) = serve(|_| (400, "schema".into())).await;
    let sink = sink(&url, HttpBatchSpec::default(), 3);
    for outcome in deliver(&sink, &records(4)).await {
        let Outcome::Rejected { reason } = outcome else { panic!("{outcome:?}") };
        assert!(reason.contains("HTTP 400 Bad Request") && reason.contains("schema"), "{reason}");
    }
    assert_eq!(sink.stats().unwrap().batches.failed(ItemFailure::BatchRejected), 4);
}

#[tokio::test]
async fn an_answer_naming_an_unknown_event_fails_the_whole_batch_for_the_receivers_fault() {
    let (receiver, url) =
        serve(|_| (200, r#"{"batchItemFailures":[{"itemIdentifier":"nobody"}]}"#.into())).await;
    let sink = sink(&url, HttpBatchSpec::default(), 2);
    for outcome in deliver(&sink, &records(3)).await {
        let Outcome::Failed { reason } = outcome else { panic!("{outcome:?}") };
        assert!(reason.contains("itemIdentifier nobody, which is no event of this batch"), "{reason}");
    }
    assert!(receiver.hits().values().all(|&n| n == 2), "every event is sent again");
    assert_eq!(sink.stats().unwrap().batches.failed(ItemFailure::BadAnswer), 6);
}

#[test]
fn bad_batch_fields_are_named() {
    let http = || {
        let spec: HttpSinkSpec =
            serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:1/"})).unwrap();
        HttpSink::new("h", &spec, RetryPolicy::from_spec(&RetrySpec::default())).unwrap()
    };
    let field = |spec: HttpBatchSpec| HttpBatchSink::new(http(), &spec).err().unwrap().field;
    assert_eq!(field(HttpBatchSpec { max_events: 101, ..HttpBatchSpec::default() }), "http.batch.maxEvents");
    assert_eq!(field(HttpBatchSpec { max_bytes: 10, ..HttpBatchSpec::default() }), "http.batch.maxBytes");
    let wait = HttpBatchSpec { max_wait_milliseconds: 10_001, ..HttpBatchSpec::default() };
    assert_eq!(field(wait), "http.batch.maxWaitMilliseconds");
}
