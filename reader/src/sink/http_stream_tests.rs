//! The http sink streaming an object from a fake S3 on loopback to a real receiver: `timeoutMs`
//! bounds the time without progress, not the whole request, so a body that keeps moving is sent
//! once however long it takes, while a stalled read or a missing answer still times out.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;

use super::http_tests::{Reply, deliver, serve, sink};
use super::testing::record;
use super::{Outcome, Sink};
use crate::config::payload::Bounds;
use crate::payload::{Fetched, Fetcher, StreamSource};
use crate::record::Record;

const ETAG: &str = "\"e1\"";
const PIECES: usize = 20;
const PIECE: usize = 64 * 1024;

/// How the fake S3 sends the object: a pause before each piece, and a longer one before the
/// piece at `stall_before` (if any).
#[derive(Clone)]
struct Pace {
    object: Arc<Vec<u8>>,
    every: Duration,
    stall_before: Option<(usize, Duration)>,
}

/// HeadObject and GetObject of the one object, the GET sent piece by piece at `Pace`.
async fn object(State(pace): State<Pace>, method: Method) -> Response {
    let answer =
        Response::builder().header(header::ETAG, ETAG).header(header::CONTENT_LENGTH, pace.object.len());
    if method == Method::HEAD {
        return answer.body(Body::empty()).unwrap_or_default();
    }
    let pieces = futures::stream::iter(0..PIECES).then(move |i| {
        let pace = pace.clone();
        async move {
            let stall = pace.stall_before.filter(|(at, _)| *at == i).map_or(Duration::ZERO, |(_, d)| d);
            tokio::time::sleep(pace.every + stall).await;
            Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(&pace.object[i * PIECE..(i + 1) * PIECE]))
        }
    });
    answer.status(StatusCode::OK).body(Body::from_stream(pieces)).unwrap_or_default()
}

/// A record standing for the object a fake S3 serves at `pace`.
/// A record of the object `pace` serves, and the reader a sink opens it through.
async fn streamed_record(pace: Pace) -> (Arc<Record>, Arc<StreamSource>) {
    let app = Router::new().fallback(object).with_state(pace.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new("a", "b", None, None, "test"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    let bounds = Bounds {
        max_object_bytes: 1 << 30,
        max_concurrent_fetches: 2,
        max_bytes_in_flight: 1 << 30,
        stream_above_bytes: 0,
    };
    let fetcher = Fetcher::new(aws_sdk_s3::Client::from_conf(config), bounds, Arc::default());
    let size = pace.object.len() as u64;
    let Ok(Fetched::Streamed(object)) = fetcher.fetch_or_refer("inbox", "big.bin", None, Some(size)).await
    else {
        panic!("the fake S3 did not answer HeadObject with a reference");
    };
    let mut r = record("big");
    r.object = Some(Arc::new(object));
    (Arc::new(r), fetcher.streams().clone())
}

fn paced(every: Duration, stall_before: Option<(usize, Duration)>) -> Pace {
    let object: Vec<u8> = (0..PIECES * PIECE).map(|i| (i % 253) as u8).collect();
    Pace { object: Arc::new(object), every, stall_before }
}

/// 20 pieces 100 ms apart take 2 s, twice the 1 s timeout, and the body keeps moving: one
/// request, delivered whole. A timeout over the whole request failed it and sent it again.
#[tokio::test]
async fn a_streamed_body_longer_than_the_timeout_is_sent_once_while_it_moves() {
    let (server, url) = serve(|_| Reply::Status(200)).await;
    let pace = paced(Duration::from_millis(100), None);
    let (record, objects) = streamed_record(pace.clone()).await;
    let sink = sink(&url, 1_000, 1, 3).objects(Some(objects));
    assert_eq!(deliver(&sink, &[record]).await, vec![Outcome::Delivered]);
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one request");
    assert!(seen[0].1.as_ref() == pace.object.as_slice(), "the body is the object, whole");
    assert_eq!(sink.stats().map(|s| s.retries()), Some(0));
}

/// The receiver took the body whole but answers only after 3 s: the answer after the body is
/// bounded by the timeout, and the attempt is retried (the receiver sees `ce-id` twice).
#[tokio::test]
async fn no_answer_after_a_streamed_body_times_out() {
    let (server, url) =
        serve(|n| if n == 0 { Reply::SlowOk(Duration::from_secs(3)) } else { Reply::Status(200) }).await;
    let (record, objects) = streamed_record(paced(Duration::ZERO, None)).await;
    let sink = sink(&url, 1_000, 1, 3).objects(Some(objects));
    assert_eq!(deliver(&sink, &[record]).await, vec![Outcome::Delivered]);
    assert_eq!(server.hits.lock().unwrap().get("big"), Some(&2));
    assert_eq!(sink.stats().map(|s| s.retries()), Some(1));
}

/// S3 stops sending halfway for 4 s: nothing moves for the 1 s timeout, the attempt fails with
/// a reason that says so, and the receiver never saw a whole request.
#[tokio::test]
async fn a_stalled_streamed_body_times_out_with_its_reason() {
    let (server, url) = serve(|_| Reply::Status(200)).await;
    let (record, objects) =
        streamed_record(paced(Duration::ZERO, Some((PIECES / 2, Duration::from_secs(4))))).await;
    let sink = sink(&url, 1_000, 1, 1).objects(Some(objects));
    let outcomes = deliver(&sink, &[record]).await;
    let [Outcome::Failed { reason }] = outcomes.as_slice() else { panic!("{outcomes:?}") };
    assert!(
        reason.contains("s3://inbox/big.bin") && reason.contains("nothing moved for 1000 ms"),
        "{reason}"
    );
    assert!(server.seen.lock().unwrap().is_empty(), "a cut body is no request");
}
