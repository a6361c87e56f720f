//! Holding through fetch failures against real HTTP endpoints on loopback: an S3 that answers
//! 503 for a while and then serves the object, and an endpoint that refuses every connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sluice_crds::PayloadFormat;

use super::{past_cap, resolve};
use crate::aws::visibility::HOLD_LIMIT;
use crate::config::payload::Bounds;
use crate::payload::{Fetcher, Resolution, Resolver, pointer};
use crate::process::backoff::LONGEST_HOLD_RETRY;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;
use crate::sink::testing::record;

const OBJECT: &[u8] = b"the object's bytes";

/// GetObject: 503 SlowDown for the first `failing` requests, then the object.
async fn get_object(State((failing, seen)): State<(usize, Arc<AtomicUsize>)>) -> Response {
    if seen.fetch_add(1, Ordering::Relaxed) < failing {
        let xml = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        return Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .body(Body::from(xml))
            .unwrap_or_default();
    }
    Response::builder().body(Body::from(OBJECT)).unwrap_or_default()
}

/// An S3 endpoint failing its first `failing` GetObjects; the count of requests it saw.
async fn serve(failing: usize) -> (String, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(get_object).with_state((failing, seen.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn resolver(url: &str) -> Resolver {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new("a", "b", None, None, "test"))
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .endpoint_url(url)
        .force_path_style(true)
        .build();
    let bounds = Bounds {
        max_object_bytes: 1 << 20,
        max_concurrent_fetches: 1,
        max_bytes_in_flight: 1 << 20,
        stream_above_bytes: 1 << 20,
    };
    let fetcher = Fetcher::new(aws_sdk_s3::Client::from_conf(config), bounds, Default::default());
    Resolver::new(PayloadFormat::Raw, true, fetcher, Vec::new())
}

fn pointer_record() -> crate::record::Record {
    let mut r = record("m");
    r.body = pointer::write("inbox", "k").into();
    r
}

fn fetch_failures(metrics: &Metrics) -> String {
    let text = metrics.encode();
    text.lines().find(|l| l.contains("fetch_failed")).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_fetch_failing_past_its_own_retries_is_held_and_fetched_again_until_s3_answers() {
    // The fetch itself tries 4 times: 6 failures outlast one whole fetch and part of the next.
    let (url, seen) = serve(6).await;
    let (stop, metrics) = (Stop::new(), Metrics::new());
    let resolution = resolve(&resolver(&url), pointer_record(), Instant::now(), &stop, &metrics).await;
    let Resolution::Deliver(record) = resolution else { panic!("expected the object to be delivered") };
    assert_eq!(&record.body[..], OBJECT);
    println!("GetObject calls: {}; {}", seen.load(Ordering::Relaxed), fetch_failures(&metrics));
    assert_eq!(seen.load(Ordering::Relaxed), 7, "6 refused, then the one that served it");
    assert!(fetch_failures(&metrics).ends_with(" 1"), "one held round: {}", fetch_failures(&metrics));
}

#[tokio::test]
async fn a_stop_hands_a_held_message_back_at_once() {
    // A port nobody listens on: every connection is refused.
    let refusing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", refusing.local_addr().unwrap());
    drop(refusing);
    let (stop, metrics) = (Arc::new(Stop::new()), Arc::new(Metrics::new()));
    let held = {
        let (stop, metrics) = (stop.clone(), metrics.clone());
        tokio::spawn(async move {
            resolve(&resolver(&url), pointer_record(), Instant::now(), &stop, &metrics).await
        })
    };
    // Held: at least one whole fetch failed (generous bound for a busy machine).
    let deadline = Instant::now() + Duration::from_secs(60);
    while fetch_failures(&metrics).is_empty() {
        assert!(Instant::now() < deadline, "no fetch failure in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!held.is_finished(), "a refused fetch must hold the message, not release it");
    stop.drain();
    match tokio::time::timeout(Duration::from_secs(30), held).await {
        Ok(Ok(Resolution::Release(_, reason))) => assert!(reason.contains("stopping"), "{reason}"),
        Ok(Ok(_)) => panic!("expected a release on the stop"),
        Ok(Err(e)) => panic!("hold task failed: {e}"),
        Err(_) => panic!("the stop did not end the hold"),
    }
}

#[test]
fn a_hold_ends_only_near_the_visibility_cap() {
    let delay = LONGEST_HOLD_RETRY;
    assert!(!past_cap(Duration::from_secs(3600), delay));
    assert!(!past_cap(HOLD_LIMIT - delay - Duration::from_secs(1), delay));
    assert!(past_cap(HOLD_LIMIT - delay, delay));
}
