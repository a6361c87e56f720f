//! Streamed reads against a real HTTP server that answers GetObject as S3 does: a read cut midway
//! resumes from the byte it stopped at, again and again while each read brings bytes, and gives
//! up after reads that bring none; a replaced object (ETag changed) is a permanent failure.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::Semaphore;

use super::fetch::FetchError;
use super::stream::{ObjectBody, RESUMES, StreamSource};
use crate::config::payload::Bounds;
use crate::process::fetch_stats::FetchStats;
use crate::record::ObjectRef;

const ETAG: &str = "\"e1\"";
/// Where the server cuts its first answer.
const CUT_AT: usize = 1024 * 1024;

#[derive(Clone)]
struct Bucket {
    object: Arc<Vec<u8>>,
    /// The Range header of every GetObject, in order.
    ranges: Arc<Mutex<Vec<Option<String>>>>,
    /// Answers still to cut, and after how many bytes of each.
    cuts: Arc<Mutex<usize>>,
    cut_at: usize,
}

/// GetObject: 412 unless `If-Match` is the ETag; the first `cuts` answers (plain or ranged)
/// are cut after `cut_at` bytes (their connection dropped), the next one answers in full.
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
    let from = range.and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse::<usize>().ok());
    let answer = match from {
        None => Response::builder().header(header::ETAG, ETAG),
        Some(from) => Response::builder()
            .header(header::ETAG, ETAG)
            .status(StatusCode::PARTIAL_CONTENT)
            .header(header::CONTENT_RANGE, format!("bytes {from}-{}/{size}", size - 1)),
    };
    let from = from.unwrap_or(0);
    let answer = answer.header(header::CONTENT_LENGTH, size - from);
    let cut = {
        let mut cuts = bucket.cuts.lock().unwrap_or_else(|e| e.into_inner());
        let cut = *cuts > 0;
        *cuts = cuts.saturating_sub(1);
        cut
    };
    if !cut {
        return answer.body(Body::from(object[from..].to_vec())).unwrap_or_default();
    }
    let first = bytes::Bytes::copy_from_slice(&object[from..(from + bucket.cut_at).min(size)]);
    // The first piece reaches the reader before the connection drops.
    let dropped = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        Err(std::io::Error::other("connection dropped"))
    };
    let cut = futures::stream::iter([Ok(first)]).chain(futures::stream::once(dropped));
    answer.body(Body::from_stream(cut)).unwrap_or_default()
}

async fn serve(object: Vec<u8>) -> (String, Bucket) {
    serve_cutting(object, 1, CUT_AT).await
}

/// A bucket whose first `cuts` answers are cut after `cut_at` bytes each.
async fn serve_cutting(object: Vec<u8>, cuts: usize, cut_at: usize) -> (String, Bucket) {
    let bucket =
        Bucket { object: Arc::new(object), ranges: Arc::default(), cuts: Arc::new(Mutex::new(cuts)), cut_at };
    let app = Router::new().fallback(get_object).with_state(bucket.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bucket)
}

/// An object and the reader it is opened through.
struct Streamed(StreamSource, ObjectRef);

impl Streamed {
    async fn open(&self) -> Result<ObjectBody, FetchError> {
        self.0.open(&self.1).await
    }
}

fn streamed(url: &str, size: usize, etag: &str) -> Streamed {
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
        Arc::default(),
    );
    let object = ObjectRef {
        bucket: "inbox".into(),
        key: "big.bin".into(),
        version_id: None,
        size: size as u64,
        etag: Some(etag.into()),
        stream_above_bytes: 0,
    };
    Streamed(source, object)
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

/// A busy endpoint cuts the read of a sink that pauses between pieces, again and again, each
/// after more bytes arrived: the read goes on as long as every resume brings bytes.
#[tokio::test]
async fn a_read_cut_again_and_again_resumes_while_each_read_brings_bytes() {
    let object: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let cuts = 2 * RESUMES as usize + 1;
    let (url, bucket) = serve_cutting(object.clone(), cuts, 300_000).await;
    let mut body = streamed(&url, object.len(), ETAG).open().await.unwrap();
    let mut read = Vec::new();
    while let Some(piece) = body.next_chunk().await {
        read.extend_from_slice(&piece.unwrap());
    }
    assert!(read == object, "read {} bytes, not the object's {}", read.len(), object.len());
    let ranges = bucket.ranges.lock().unwrap().clone();
    let want: Vec<Option<String>> =
        (0..=cuts).map(|i| (i > 0).then(|| format!("bytes={}-", i * 300_000))).collect();
    assert_eq!(ranges, want, "{cuts} cuts, each resumed from its byte");
}

/// Reads that bring nothing are not resumed for ever: after `RESUMES` of them the read fails
/// (transient: the sink's retry policy decides what comes next).
#[tokio::test]
async fn resumes_that_bring_no_byte_end_the_read() {
    let object: Vec<u8> = vec![3; 100_000];
    let (url, bucket) = serve_cutting(object, usize::MAX, 0).await;
    let mut body = streamed(&url, 100_000, ETAG).open().await.unwrap();
    let failure = loop {
        match body.next_chunk().await {
            Some(Ok(piece)) => assert!(piece.is_empty(), "the server sends no byte"),
            Some(Err(e)) => break e,
            None => panic!("read to the end of an object the server never sends"),
        }
    };
    let FetchError::Transient(reason) = failure else { panic!("permanent: {}", failure.reason()) };
    assert!(reason.contains(&format!("the last {RESUMES} without a byte read")), "{reason}");
    assert_eq!(
        bucket.ranges.lock().unwrap().len(),
        1 + RESUMES as usize,
        "the first read and {RESUMES} resumes"
    );
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
