//! Objects above `streamAboveBytes`: checked at intake, read by each sink as it delivers them.
//!
//! Why a reference and not the bytes: a record is held from intake until every sink answered for
//! it, so an object in the record costs its whole size for that long, once per record in flight.
//! A reference costs nothing; a sink that reads it holds one window of the object at a time.
//! Each read is pinned to the version and ETag intake checked (`If-Match`), so a retry, which
//! reads the object again from its start, never mixes two versions: a replaced object fails with
//! `PreconditionFailed`, a deleted one with `NoSuchKey`, both permanent (dead-lettered).
//! A read cut midway (a connection an S3 endpoint dropped while the sink was busy writing) is
//! resumed from the byte it stopped at, under the same pin, for as long as each read makes
//! progress: the s3 sink leaves its read idle while it uploads a part, and a busy endpoint cuts
//! such reads again and again, each after more of the object arrived. Counting every cut would
//! fail a read that is getting there, and the sink's failure would send the whole message to
//! every sink once more (README, "Failure behaviour"). A read fails only when [`RESUMES`]
//! resumes in a row brought no byte before the next cut.
//!
//! The reader's fetch bounds cover these reads too: an open read holds one of the
//! `maxConcurrentFetches` slots and a window of `maxBytesInFlight` ([`WINDOW_BYTES`], or the
//! whole budget if that is smaller) until it ends or is dropped.

use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::events::ReadResumed;
use super::fetch::{FetchError, classify, kib};
use crate::config::payload::Bounds;
use crate::process::events::Event;
use crate::process::fetch_stats::FetchStats;
use crate::process::metrics::Metrics;
use crate::record::ObjectRef;

/// Bytes of `maxBytesInFlight` an open read counts: about what one sink holds of it at a time
/// (the s3 sink's part; the http sink holds far less).
pub const WINDOW_BYTES: u64 = 8 * 1024 * 1024;

/// How long a read may make no progress before it fails: longer than a sink takes to write a
/// window elsewhere (the s3 sink uploads a part between two reads).
pub const STALL_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// What streamed objects are read through: the fetcher's client, slots and byte budget. Sinks
/// that stream get it at build (`sink::SinkContext::objects`).
pub struct StreamSource {
    client: Client,
    fetches: Arc<Semaphore>,
    budget: Arc<Semaphore>,
    window_kib: u32,
    stats: Arc<FetchStats>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for StreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource").field("window_kib", &self.window_kib).finish_non_exhaustive()
    }
}

impl StreamSource {
    pub(super) fn new(
        client: Client,
        fetches: Arc<Semaphore>,
        budget: Arc<Semaphore>,
        bounds: Bounds,
        stats: Arc<FetchStats>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let window_kib = kib(WINDOW_BYTES.min(bounds.max_bytes_in_flight));
        Self { client, fetches, budget, window_kib, stats, metrics }
    }

    /// Start reading `object`: one GetObject, pinned to the checked version and ETag, within
    /// the reader's fetch bounds. Not retried here: the sink's retry policy decides, and a retry
    /// opens it again.
    pub async fn open(&self, object: &ObjectRef) -> Result<ObjectBody, FetchError> {
        let stopping = |_| FetchError::Transient("the reader is stopping".into());
        let slot = self.fetches.clone().acquire_owned().await.map_err(stopping)?;
        let window = self.budget.clone().acquire_many_owned(self.window_kib).await.map_err(stopping)?;
        let body = get(&self.client, object, 0).await?;
        Ok(ObjectBody {
            body,
            object: object.clone(),
            client: self.client.clone(),
            read: 0,
            resumes: 0,
            stalled: 0,
            read_at_cut: 0,
            done: false,
            _permits: (slot, window),
            stats: self.stats.clone(),
            metrics: self.metrics.clone(),
        })
    }
}

/// Open `object` through `source`; a sink built without one (no payload lives in S3) was handed
/// a record no resolver made, which it cannot read.
pub async fn open(source: Option<&StreamSource>, object: &ObjectRef) -> Result<ObjectBody, FetchError> {
    match source {
        Some(source) => source.open(object).await,
        None => Err(FetchError::Permanent(format!("{}: no S3 reader for streamed objects", object.at()))),
    }
}

/// GetObject of `object` from byte `from` on, pinned to its version and ETag.
async fn get(client: &Client, object: &ObjectRef, from: u64) -> Result<ByteStream, FetchError> {
    let at = object.at();
    let output = client
        .get_object()
        .bucket(&object.bucket)
        .key(&object.key)
        .set_version_id(object.version_id.clone())
        .set_if_match(object.etag.clone())
        .set_range((from > 0).then(|| format!("bytes={from}-")))
        .send()
        .await
        .map_err(|e| classify("GetObject", &at, &e))?;
    let len = u64::try_from(output.content_length.unwrap_or(0)).unwrap_or(0);
    if len != object.size.saturating_sub(from) {
        return Err(FetchError::Permanent(format!(
            "GetObject {at} from byte {from} answered {len} bytes of the {} checked at intake: the object was replaced",
            object.size
        )));
    }
    Ok(output.body)
}

/// Resumes in a row that bring no byte before the next cut, after which the sink is told the
/// read failed.
pub const RESUMES: u32 = 3;

/// An error and its causes on one line (the SDK's own text is only "streaming error").
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An open read of a streamed object, holding its fetch slot and window until it is dropped.
pub struct ObjectBody {
    body: ByteStream,
    object: ObjectRef,
    client: Client,
    read: u64,
    /// Every resume so far (for messages).
    resumes: u32,
    /// Cuts in a row with no byte read since the one before.
    stalled: u32,
    /// `read` at the last cut.
    read_at_cut: u64,
    done: bool,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    stats: Arc<FetchStats>,
    metrics: Arc<Metrics>,
}

impl ObjectBody {
    /// The next piece of the object; `None` once all of it, and exactly its size, was read.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, FetchError>> {
        loop {
            if self.done {
                return None;
            }
            let next = self.body.next().await;
            let (read, size, at) = (self.read, self.object.size, self.object.at());
            let cut = match next {
                Some(Ok(chunk)) => {
                    self.read += chunk.len() as u64;
                    if self.read > size {
                        self.done = true;
                        let reason = format!("{at} is longer than the {size} bytes it announced");
                        return Some(Err(FetchError::Permanent(reason)));
                    }
                    return Some(Ok(chunk));
                }
                Some(Err(e)) => format!("reading {at} failed after {read} bytes: {}", chain(&e)),
                None if read < size => format!("reading {at} ended after {read} of {size} bytes"),
                None => {
                    self.stats.streamed(size);
                    self.done = true;
                    return None;
                }
            };
            if let Err(e) = self.resume(cut).await {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    /// Read on from where the read was cut, unless [`RESUMES`] cuts in a row brought nothing.
    async fn resume(&mut self, cut: String) -> Result<(), FetchError> {
        self.stalled = if self.read > self.read_at_cut || self.resumes == 0 { 1 } else { self.stalled + 1 };
        self.read_at_cut = self.read;
        if self.stalled > RESUMES {
            let (resumes, stalled) = (self.resumes, RESUMES);
            return Err(FetchError::Transient(format!(
                "{cut} (resumed {resumes} times, the last {stalled} without a byte read)"
            )));
        }
        self.resumes += 1;
        ReadResumed { reason: &cut }.emit(&self.metrics);
        tokio::time::sleep(std::time::Duration::from_millis(200) * self.stalled).await;
        self.body = get(&self.client, &self.object, self.read).await?;
        Ok(())
    }

    /// The rest of the object as a stream of pieces (for a streamed request body).
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, FetchError>> + Send + 'static {
        futures::stream::unfold(self, |mut body| async move { body.next_chunk().await.map(|c| (c, body)) })
    }
}
