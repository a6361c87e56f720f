//! Fetching an object from S3 within the reader's bounds: at most `maxConcurrentFetches` GetObject
//! calls at once, at most `maxBytesInFlight` bytes of fetched objects held at once, no object over
//! `maxObjectBytes`. An object over `streamAboveBytes` is not fetched here: it is checked
//! (HeadObject) and referred to, and the sinks stream it (`stream.rs`).
//!
//! Why the byte budget travels with the body: an object is held from its fetch until every sink
//! has answered for it, so the permit for its bytes is owned by the body itself
//! (`Bytes::from_owner`) and comes back when the last copy of the record is dropped, wherever that
//! happens. The budget is counted in KiB because a semaphore counts in u32.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use bytes::Bytes;
use sluice_aws::{AwsFault, FaultClass};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::events::{FetchAnswered, FetchFailed};
use super::stream::StreamSource;
use crate::config::payload::Bounds;
use crate::process::backoff::backoff;
use crate::process::events::Event;
use crate::process::fetch_stats::FetchStats;
use crate::process::metrics::Metrics;
use crate::record::ObjectRef;

/// Attempts of one fetch before it counts as failed (the message is then held and fetched again:
/// `hold`).
const ATTEMPTS: usize = 4;
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LONGEST_RETRY: Duration = Duration::from_secs(5);

/// What a fetch answers: the object's bytes, or, above `streamAboveBytes`, a checked reference.
pub enum Fetched {
    Whole(Bytes),
    Streamed(ObjectRef),
}

#[derive(Debug, PartialEq, Eq)]
pub enum FetchError {
    /// Missing, denied or too large: the message goes to the dead-letter sink with this reason.
    Permanent(String),
    /// Still failing after the retries: the message is held and fetched again (`payload::hold`).
    Transient(String),
}

impl FetchError {
    pub fn reason(&self) -> &str {
        match self {
            FetchError::Permanent(reason) | FetchError::Transient(reason) => reason,
        }
    }
}

pub struct Fetcher {
    client: Client,
    bounds: Bounds,
    fetches: Arc<Semaphore>,
    /// KiB of fetched bodies alive.
    budget: Arc<Semaphore>,
    pub(super) stats: Arc<FetchStats>,
    /// What streamed objects read through: the same client, slots and budget.
    streams: Arc<StreamSource>,
    /// Where the fetch health and the WARN lines go (`payload::events`).
    metrics: Arc<Metrics>,
}

/// A fetched body and the budget it holds.
struct Held {
    data: Vec<u8>,
    _permit: OwnedSemaphorePermit,
    stats: Arc<FetchStats>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stats.held_bytes.fetch_sub(self.data.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(super) fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

impl Fetcher {
    pub fn new(client: Client, bounds: Bounds, metrics: Arc<Metrics>) -> Self {
        let fetches = Arc::new(Semaphore::new(bounds.max_concurrent_fetches.max(1)));
        let budget = Arc::new(Semaphore::new(kib(bounds.max_bytes_in_flight) as usize));
        let stats: Arc<FetchStats> = Arc::default();
        let streams = Arc::new(StreamSource::new(
            client.clone(),
            fetches.clone(),
            budget.clone(),
            bounds,
            stats.clone(),
            metrics.clone(),
        ));
        Self { client, bounds, fetches, budget, stats, streams, metrics }
    }

    /// What sinks read streamed objects through.
    pub fn streams(&self) -> &Arc<StreamSource> {
        &self.streams
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The object's bytes, retrying transient failures a few times with backoff.
    pub async fn fetch(&self, bucket: &str, key: &str, version: Option<&str>) -> Result<Bytes, FetchError> {
        let whole =
            retrying(&self.metrics, bucket, key, || self.fetch_once(bucket, key, version, false)).await?;
        match whole {
            Fetched::Whole(bytes) => Ok(bytes),
            Fetched::Streamed(_) => Err(FetchError::Transient("a whole fetch answered a reference".into())),
        }
    }

    /// The object's bytes, or above `streamAboveBytes` a reference the sinks stream from.
    /// `size`: the size the notification states, if any (a larger one is checked with HeadObject
    /// and never downloaded here; otherwise the GetObject's own length decides).
    pub async fn fetch_or_refer(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        size: Option<u64>,
    ) -> Result<Fetched, FetchError> {
        if size.is_some_and(|s| s > self.bounds.stream_above_bytes) {
            return retrying(&self.metrics, bucket, key, || self.head(bucket, key, version)).await;
        }
        retrying(&self.metrics, bucket, key, || self.fetch_once(bucket, key, version, true)).await
    }

    /// HeadObject: the object exists, may be read, is within `maxObjectBytes`; its reference.
    async fn head(&self, bucket: &str, key: &str, version: Option<&str>) -> Result<Fetched, FetchError> {
        let at = format!("s3://{bucket}/{key}");
        let answer = self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .send()
            .await
            .map_err(|e| classify("HeadObject", &at, &e))?;
        let size = u64::try_from(answer.content_length.unwrap_or(0)).unwrap_or(0);
        self.within_limit(&at, size)?;
        let object = ObjectRef {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            version_id: answer.version_id.or_else(|| version.map(str::to_owned)),
            size,
            etag: answer.e_tag,
            stream_above_bytes: self.bounds.stream_above_bytes,
        };
        Ok(Fetched::Streamed(object))
    }

    fn within_limit(&self, at: &str, size: u64) -> Result<(), FetchError> {
        if size > self.bounds.max_object_bytes {
            return Err(FetchError::Permanent(format!(
                "{at} is {size} bytes, over spec.payload.maxObjectBytes ({}): raise the limit or keep such objects out of the notification",
                self.bounds.max_object_bytes
            )));
        }
        Ok(())
    }

    /// One GetObject. With `refer`, an object over `streamAboveBytes` is not read: its reference
    /// is answered from the response's headers (the connection is dropped).
    async fn fetch_once(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        refer: bool,
    ) -> Result<Fetched, FetchError> {
        let at = format!("s3://{bucket}/{key}");
        let _slot =
            self.fetches.acquire().await.map_err(|_| FetchError::Transient("reader stopping".into()))?;
        let answer = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .send();
        let mut output = answer.await.map_err(|e| classify("GetObject", &at, &e))?;
        let size = u64::try_from(output.content_length.unwrap_or(0)).unwrap_or(0);
        self.within_limit(&at, size)?;
        if refer && size > self.bounds.stream_above_bytes {
            let object = ObjectRef {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                version_id: output.version_id.take().or_else(|| version.map(str::to_owned)),
                size,
                etag: output.e_tag.take(),
                stream_above_bytes: self.bounds.stream_above_bytes,
            };
            return Ok(Fetched::Streamed(object));
        }
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(kib(size))
            .await
            .map_err(|_| FetchError::Transient("reader stopping".into()))?;
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        while let Some(chunk) = output.body.next().await {
            let chunk = chunk.map_err(|e| FetchError::Transient(format!("reading {at} failed: {e}")))?;
            if (data.len() + chunk.len()) as u64 > size.max(self.bounds.max_object_bytes) {
                return Err(FetchError::Permanent(format!(
                    "{at} is longer than spec.payload.maxObjectBytes ({})",
                    self.bounds.max_object_bytes
                )));
            }
            data.extend_from_slice(&chunk);
        }
        self.stats.fetched(data.len() as u64);
        Ok(Fetched::Whole(Bytes::from_owner(Held { data, _permit: permit, stats: self.stats.clone() })))
    }
}

/// `call` until it succeeds or fails permanently, transient failures retried a few times with
/// backoff.
async fn retrying<T, F, Fut>(metrics: &Metrics, bucket: &str, key: &str, mut call: F) -> Result<T, FetchError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, FetchError>>,
{
    let mut delays = backoff(FIRST_RETRY, LONGEST_RETRY);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(FetchError::Transient(reason)) if attempt < ATTEMPTS => {
                tracing::debug!(bucket, key, %reason, attempt, "object fetch failed; retrying");
                tokio::time::sleep(delays.next().unwrap_or(LONGEST_RETRY)).await;
                attempt += 1;
            }
            Err(FetchError::Transient(reason)) => {
                let reason = format!("{reason} (gave up after {attempt} attempts)");
                FetchFailed { reason: &reason }.emit(metrics);
                return Err(FetchError::Transient(reason));
            }
            other => {
                // The object or a permanent refusal: either way S3 answered.
                FetchAnswered.emit(metrics);
                return other;
            }
        }
    }
}

/// A failed S3 read call (`what`: GetObject, HeadObject) as permanent (missing, denied, archived,
/// replaced: no retry changes it) or transient (anything else, S3's fault or the network's).
pub(super) fn classify<E>(what: &str, at: &str, error: &SdkError<E, HttpResponse>) -> FetchError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let fault = AwsFault::of(error);
    let code = fault.code.as_deref().unwrap_or_default();
    let advice = match fault.class {
        _ if code == "InvalidObjectState" => {
            "the object is archived: restore it, or keep such objects out of the notification"
        }
        _ if code == "PreconditionFailed" || fault.status == Some(412) => {
            "the object was replaced since it was checked (its ETag changed)"
        }
        FaultClass::Missing if code == "NoSuchBucket" => "the bucket does not exist",
        FaultClass::Missing => "the object is gone (deleted after the event was sent?)",
        FaultClass::Denied => {
            "grant the reader's identity s3:GetObject (and s3:GetObjectVersion) on the bucket"
        }
        FaultClass::Transient | FaultClass::Other => {
            return FetchError::Transient(format!("{what} {at} failed: {}", fault.text));
        }
    };
    let fallback = match fault.class {
        FaultClass::Missing => "NotFound",
        FaultClass::Denied => "AccessDenied",
        _ => "PreconditionFailed",
    };
    let code = fault.code_or(fallback);
    FetchError::Permanent(format!("{what} {at} answered {code} ({}): {advice}", fault.text))
}
