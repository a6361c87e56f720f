//! Objects above `streamAboveBytes`: checked at intake, read by each sink as it delivers them.
//!
//! Why a reference and not the bytes: a record is held from intake until every sink answered for
//! it, so an object in the record costs its whole size for that long, once per record in flight.
//! A reference costs nothing; a sink that reads it holds one window of the object at a time.
//! Each read is pinned to the version and ETag intake checked (`If-Match`), so a retry, which
//! reads the object again from its start, never mixes two versions: a replaced object fails with
//! `PreconditionFailed`, a deleted one with `NoSuchKey`, both permanent (dead-lettered).
//!
//! The reader's fetch bounds cover these reads too: an open read holds one of the
//! `maxConcurrentFetches` slots and a window of `maxBytesInFlight` ([`WINDOW_BYTES`], or the
//! whole budget if that is smaller) until it ends or is dropped.

use std::fmt;
use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::FetchStats;
use super::fetch::{Bounds, FetchError, classify, kib};

/// Bytes of `maxBytesInFlight` an open read counts: about what one sink holds of it at a time
/// (the s3 sink's part; the http sink holds far less).
pub const WINDOW_BYTES: u64 = 8 * 1024 * 1024;

/// The object a streamed record stands for, as intake checked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub bucket: String,
    pub key: String,
    pub version_id: Option<String>,
    pub size: u64,
    pub etag: Option<String>,
}

impl ObjectRef {
    /// `s3://bucket/key`, for messages.
    pub fn at(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }
}

/// What streamed objects are read through: the fetcher's client, slots and byte budget.
pub struct StreamSource {
    client: Client,
    fetches: Arc<Semaphore>,
    budget: Arc<Semaphore>,
    window_kib: u32,
    stream_above_bytes: u64,
    stats: Arc<FetchStats>,
}

impl StreamSource {
    pub(super) fn new(
        client: Client,
        fetches: Arc<Semaphore>,
        budget: Arc<Semaphore>,
        bounds: Bounds,
        stats: Arc<FetchStats>,
    ) -> Self {
        let window_kib = kib(WINDOW_BYTES.min(bounds.max_bytes_in_flight));
        Self { client, fetches, budget, window_kib, stream_above_bytes: bounds.stream_above_bytes, stats }
    }
}

/// A record's object, to be read by the sinks that deliver it.
pub struct StreamedObject {
    pub object: ObjectRef,
    source: Arc<StreamSource>,
}

impl fmt::Debug for StreamedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamedObject").field("object", &self.object).finish_non_exhaustive()
    }
}

impl StreamedObject {
    pub fn new(object: ObjectRef, source: Arc<StreamSource>) -> Self {
        Self { object, source }
    }

    pub fn size(&self) -> u64 {
        self.object.size
    }

    /// Why `sink` (of a kind that needs the whole body) does not take this object.
    pub fn refusal(&self, sink: &str) -> String {
        refusal(&self.object, sink, self.source.stream_above_bytes)
    }

    /// Start reading the object: one GetObject, pinned to the checked version and ETag, within
    /// the reader's fetch bounds. Not retried here: the sink's retry policy decides, and a retry
    /// opens it again.
    pub async fn open(&self) -> Result<ObjectBody, FetchError> {
        let source = &self.source;
        let object = &self.object;
        let stopping = |_| FetchError::Transient("the reader is stopping".into());
        let slot = source.fetches.clone().acquire_owned().await.map_err(stopping)?;
        let window = source.budget.clone().acquire_many_owned(source.window_kib).await.map_err(stopping)?;
        let at = object.at();
        let output = source
            .client
            .get_object()
            .bucket(&object.bucket)
            .key(&object.key)
            .set_version_id(object.version_id.clone())
            .set_if_match(object.etag.clone())
            .send()
            .await
            .map_err(|e| classify("GetObject", &at, &e))?;
        let len = u64::try_from(output.content_length.unwrap_or(0)).unwrap_or(0);
        if len != object.size {
            return Err(FetchError::Permanent(format!(
                "GetObject {at} answered {len} bytes, not the {} checked at intake: the object was replaced",
                object.size
            )));
        }
        Ok(ObjectBody {
            body: output.body,
            at,
            size: object.size,
            read: 0,
            done: false,
            _permits: (slot, window),
            stats: source.stats.clone(),
        })
    }
}

/// The one-line reason a sink that needs whole bodies gives for a streamed object.
pub fn refusal(object: &ObjectRef, sink: &str, stream_above_bytes: u64) -> String {
    format!(
        "{} is {} bytes, above spec.payload.streamAboveBytes ({stream_above_bytes}), and sink {sink} cannot stream it (only http and s3 sinks do): route such objects to an http or s3 sink, or raise streamAboveBytes",
        object.at(),
        object.size
    )
}

/// An open read of a streamed object, holding its fetch slot and window until it is dropped.
pub struct ObjectBody {
    body: ByteStream,
    at: String,
    size: u64,
    read: u64,
    done: bool,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    stats: Arc<FetchStats>,
}

impl ObjectBody {
    /// The next piece of the object; `None` once all of it, and exactly its size, was read.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, FetchError>> {
        if self.done {
            return None;
        }
        let next = self.body.next().await;
        let (read, size, at) = (self.read, self.size, &self.at);
        let answer = match next {
            Some(Ok(chunk)) => {
                self.read += chunk.len() as u64;
                if self.read > size {
                    Err(FetchError::Permanent(format!("{at} is longer than the {size} bytes it announced")))
                } else {
                    return Some(Ok(chunk));
                }
            }
            Some(Err(e)) => {
                Err(FetchError::Transient(format!("reading {at} failed after {read} bytes: {e}")))
            }
            None if read < size => {
                Err(FetchError::Transient(format!("reading {at} ended after {read} of {size} bytes")))
            }
            None => {
                self.stats.streamed(size);
                self.done = true;
                return None;
            }
        };
        self.done = true;
        Some(answer)
    }

    /// The rest of the object as a stream of pieces (for a streamed request body).
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, FetchError>> + Send + 'static {
        futures::stream::unfold(self, |mut body| async move { body.next_chunk().await.map(|c| (c, body)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_object_the_limit_and_the_sink() {
        let object = ObjectRef {
            bucket: "inbox".into(),
            key: "big file.bin".into(),
            version_id: None,
            size: 52_428_800,
            etag: Some("\"e\"".into()),
        };
        let reason = refusal(&object, "forward", 8_388_608);
        assert!(reason.starts_with("s3://inbox/big file.bin is 52428800 bytes"), "{reason}");
        assert!(reason.contains("spec.payload.streamAboveBytes (8388608)"), "{reason}");
        assert!(reason.contains("sink forward cannot stream it"), "{reason}");
        assert!(!reason.contains('\n'));
    }
}
