//! Streamed reads against a real HTTP server that answers GetObject as S3 does: a read cut midway
//! resumes from the byte it stopped at, and a replaced object (ETag changed) is a permanent
//! failure.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::Semaphore;

use super::FetchStats;
use super::fetch::{Bounds, FetchError};
use super::stream::{ObjectRef, StreamSource, StreamedObject};

const ETAG: &str = "\"e1\"";
/// Where the server cuts its first answer.
const CUT_AT: usize = 1024 * 1024;

#[derive(Clone)]
struct Bucket {
    object: Arc<Vec<u8>>,
    /// The Range header of every GetObject, in order.
    ranges: Arc<Mutex<Vec<Option<String>>>>,
}

/// GetObject: 412 unless `If-Match` is the ETag; the first answer is cut after `CUT_AT` bytes
/// (its connection dropped), a ranged one answers the rest.
async fn get_object(State(bucket): State<Bucket>, headers: HeaderMap) -> Response {
    if headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) != Some(ETAG) {
        let xml = "<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>";
        return Response::builder()
            .status(StatusCode::PRECONDITION_FAILED)
            .body(Body::from(xml))
            .unwrap_or_default();
    }
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    bucket.ranges.lock().unwrap_or_else(|e| e.into_inner()).push(range.clone());
    let object = bucket.object.clone();
    let size = object.len();
    let answer = Response::builder().header(header::ETAG, ETAG);
    let Some(from) = range.and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse::<usize>().ok())
    else {
        let first = bytes::Bytes::copy_from_slice(&object[..CUT_AT]);
        // The first piece reaches the reader before the connection drops.
        let dropped = async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            Err(std::io::Error::other("connection dropped"))
        };
        let cut = futures::stream::iter([Ok(first)]).chain(futures::stream::once(dropped));
        return answer.header(header::CONTENT_LENGTH, size).body(Body::from_stream(cut)).unwrap_or_default();
    };
    answer
        .status(StatusCode::PARTIAL_CONTENT)
        .header(header::CONTENT_LENGTH, size - from)
        .header(header::CONTENT_RANGE, format!("bytes {from}-{}/{size}", size - 1))
        .body(Body::from(object[from..].to_vec()))
        .unwrap_or_default()
}

async fn serve(object: Vec<u8>) -> (String, Bucket) {
    let bucket = Bucket { object: Arc::new(object), ranges: Arc::default() };
    let app = Router::new().fallback(get_object).with_state(bucket.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bucket)
}

fn streamed(url: &str, size: usize, etag: &str) -> StreamedObject {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new("a", "b", None, None, "test"))
        .endpoint_url(url)
        .force_path_style(true)
        .build();
    let bounds = Bounds {
        max_object_bytes: 1 << 30,
        max_concurrent_fetches: 1,
        max_bytes_in_flight: 1 << 30,
        stream_above_bytes: 0,
    };
    let source = StreamSource::new(
        aws_sdk_s3::Client::from_conf(config),
        Arc::new(Semaphore::new(1)),
        Arc::new(Semaphore::new(1 << 20)),
        bounds,
        Arc::new(FetchStats::default()),
    );
    let object = ObjectRef {
        bucket: "inbox".into(),
        key: "big.bin".into(),
        version_id: None,
        size: size as u64,
        etag: Some(etag.into()),
    };
    StreamedObject::new(object, Arc::new(source))
}

#[tokio::test]
async fn a_read_cut_midway_resumes_from_the_byte_it_stopped_at() {
    let object: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (url, bucket) = serve(object.clone()).await;
    let mut body = streamed(&url, object.len(), ETAG).open().await.unwrap();
    let mut read = Vec::new();
    while let Some(piece) = body.next_chunk().await {
        read.extend_from_slice(&piece.unwrap());
    }
    assert!(read == object, "read {} bytes, not the object's {}", read.len(), object.len());
    let ranges = bucket.ranges.lock().unwrap().clone();
    assert_eq!(ranges, [None, Some(format!("bytes={CUT_AT}-"))]);
}

#[tokio::test]
async fn a_replaced_object_is_a_permanent_failure() {
    let (url, _bucket) = serve(vec![7; 16]).await;
    match streamed(&url, 16, "\"old\"").open().await {
        Err(FetchError::Permanent(reason)) => {
            assert!(
                reason.starts_with("GetObject s3://inbox/big.bin answered PreconditionFailed"),
                "{reason}"
            );
        }
        Err(FetchError::Transient(reason)) => panic!("transient: {reason}"),
        Ok(_) => panic!("read a replaced object"),
    }
}
