//! The `http` sink: one CloudEvents 1.0 binary-mode POST per record.
//!
//! Why one request per record: binary mode carries one event per request, and `ce-id` (= the SQS
//! MessageId, also sent as `Idempotency-Key`) is what lets a receiver deduplicate redeliveries.
//! That is also the whole of this sink's exactly-once story: it is `Idempotent`, which is
//! exactly-once only for receivers that deduplicate on `ce-id`.
//!
//! Concurrency is capped per sink, across all `deliver` calls, by a semaphore of
//! `spec.concurrency` permits; a permit is held for one attempt only, never across a back-off
//! sleep, so a slow retry does not starve healthy records. Redirects are not followed: a 3xx is an
//! answer the sink cannot act on, so it is non-transient.
//!
//! A streamed object (`Record::object`) is read from S3 during each attempt and sent as it
//! arrives, with its Content-Length: the request never holds more of it than the connection's
//! buffers. A retry reads it again; an object gone or replaced since intake is a rejection.
//! For such a request `timeoutMs` bounds the time without progress (no piece taken by the
//! connection, or no answer after the last piece), not the whole request: a 50 MiB body takes
//! longer than a request's usual timeout on any link slower than 10 MiB/s, and a whole-request
//! timeout that fires after the receiver took the body whole and answered sends it again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, join_all};
use reqwest::header::{CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Client, StatusCode, Url};
use sluice_crds::HttpSinkSpec;
use sluice_protocol::now_ms;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::error::SinkBuildError;
use super::fault::Fault;
use super::retry::{AttemptError, Attempts, GiveUp, RetryPolicy, parse_retry_after};
use super::secret_file::{self, SecretHeader};
use super::url::parse_http_url;
use super::{EpochSupport, Outcome, Sink, cloudevents};
use crate::payload::FetchError;
use crate::payload::StreamSource;
use crate::payload::stream::{ObjectBody, open};
use crate::process::sink_stats::SinkStats;
use crate::process::warnings::Warnings;
use crate::record::Record;

/// Bytes of a rejecting response body kept in the reason (for the dead-letter sink).
const REASON_BODY_BYTES: usize = 256;

/// The fields are the batch mode's too (`http_batch`), which sends over the same client, under
/// the same concurrency limit and retry policy.
pub struct HttpSink {
    pub(super) name: String,
    pub(super) client: Client,
    pub(super) url: Url,
    pub(super) event_type: String,
    pub(super) extra_headers: HeaderMap,
    /// Headers whose values come from mounted Secret files (`secretRefs.headers`).
    pub(super) secret_headers: Vec<SecretHeader>,
    pub(super) limit: Arc<Semaphore>,
    pub(super) timeout: Duration,
    pub(super) policy: RetryPolicy,
    pub(super) stats: Arc<SinkStats>,
    /// The rate limit of this sink's own WARN lines (batch answers not understood).
    pub(super) warnings: Warnings,
    /// The reader is stopping: records still waiting for their first permit are not sent.
    pub(super) stopping: CancellationToken,
    /// What streamed objects are read through (`SinkContext::objects`).
    pub(super) objects: Option<Arc<StreamSource>>,
}

impl HttpSink {
    /// Errors name the offending field relative to the sink (`http.url`, `http.headers.X`).
    pub fn new(name: &str, spec: &HttpSinkSpec, policy: RetryPolicy) -> Result<Self, SinkBuildError> {
        Self::with_secrets_in(name, spec, policy, &secret_file::secrets_dir())
    }

    /// The same, reading `secretRefs` keys below `secrets_dir` (`<dir>/<secret>/<key>`).
    pub fn with_secrets_in(
        name: &str,
        spec: &HttpSinkSpec,
        policy: RetryPolicy,
        secrets_dir: &std::path::Path,
    ) -> Result<Self, SinkBuildError> {
        let url = parse_http_url(&spec.url).map_err(|m| SinkBuildError::new("http.url", m))?;
        let mut extra_headers = HeaderMap::new();
        for (key, value) in &spec.headers {
            let field = format!("http.headers.{key}");
            let name = HeaderName::try_from(key.as_str())
                .map_err(|e| SinkBuildError::new(&field, format!("not a valid header name: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| SinkBuildError::new(&field, format!("not a valid header value: {e}")))?;
            extra_headers.insert(name, value);
        }
        if spec.concurrency == 0 {
            return Err(SinkBuildError::new("http.concurrency", "must be at least 1"));
        }
        if spec.timeout_ms == 0 {
            return Err(SinkBuildError::new("http.timeoutMs", "must be at least 1"));
        }
        let concurrency = usize::try_from(spec.concurrency).unwrap_or(usize::MAX);
        let (secret_headers, private_roots) = match &spec.secret_refs {
            Some(refs) => secret_file::load(refs, secrets_dir)?,
            None => (Vec::new(), Vec::new()),
        };
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(concurrency)
            .tls_certs_merge(private_roots)
            .build()
            .map_err(|e| SinkBuildError::new("http", format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            client,
            url,
            event_type: spec.event_type.clone(),
            extra_headers,
            secret_headers,
            limit: Arc::new(Semaphore::new(concurrency.min(Semaphore::MAX_PERMITS))),
            timeout: Duration::from_millis(spec.timeout_ms),
            policy,
            stats: Arc::default(),
            warnings: Warnings::default(),
            stopping: CancellationToken::new(),
            objects: None,
        })
    }

    /// Give up records not yet started once `token` is cancelled (the reader's stop).
    pub fn stopping(mut self, token: CancellationToken) -> Self {
        self.stopping = token;
        self
    }

    /// Read streamed objects through `objects` (the payload stage's reader).
    pub fn objects(mut self, objects: Option<Arc<StreamSource>>) -> Self {
        self.objects = objects;
        self
    }

    pub(super) async fn deliver_one(&self, record: &Record) -> Outcome {
        let mut attempts = Attempts::new(&self.policy, &self.stats);
        // Not started when the reader stops: answer so at once, so the drain releases the record
        // instead of holding it until the requests ahead of it in the queue for permits finish.
        let first = tokio::select! {
            biased;
            () = self.stopping.cancelled() => None,
            permit = self.limit.acquire() => permit.ok(),
        };
        let Some(mut permit) = first else {
            return Outcome::NotStarted;
        };
        loop {
            let error = match self.attempt(record, permit).await {
                Ok(()) => return Outcome::Delivered,
                Err(error) => error,
            };
            let reason = error.reason;
            if error.object_unreadable {
                return Outcome::Rejected { reason };
            }
            match attempts.failed(self.policy.classify(&error.kind)) {
                Ok(delay) => {
                    tracing::debug!(sink = %self.name, message_id = %record.message_id, %reason, ?delay, "retrying");
                    tokio::time::sleep(delay).await;
                    permit = match self.limit.acquire().await {
                        Ok(permit) => permit,
                        Err(_) => return Outcome::Failed { reason: Failure::closed().reason },
                    };
                }
                // Not worth retrying now; whose fault it is decides where the record goes.
                Err(GiveUp::Permanent) => {
                    return match error.kind.fault() {
                        Fault::Record => Outcome::Rejected { reason },
                        Fault::Sink => Outcome::Failed { reason },
                    };
                }
                Err(GiveUp::Exhausted { attempts }) => {
                    let reason = format!("{reason} (gave up after {attempts} attempts)");
                    return Outcome::Failed { reason };
                }
            }
        }
    }

    /// One POST under one concurrency permit (released when the attempt ends).
    async fn attempt(&self, record: &Record, _permit: SemaphorePermit<'_>) -> Result<(), Failure> {
        let started = Instant::now();
        let mut headers = cloudevents::headers(record, &self.event_type);
        if !self.extra_headers.is_empty() {
            headers.extend(self.extra_headers.clone());
        }
        for secret in &self.secret_headers {
            headers.insert(secret.name.clone(), secret.value());
        }
        let request = self.client.post(self.url.clone());
        let sent = match &record.object {
            None => request.headers(headers).timeout(self.timeout).body(record.body.clone()).send().await,
            Some(object) => {
                let reading = open(self.objects.as_deref(), object).await.map_err(Failure::from_fetch)?;
                headers.insert(CONTENT_LENGTH, HeaderValue::from(object.size));
                let progress = Progress::default();
                let body = streamed_body(reading, progress.clone());
                tokio::select! {
                    sent = request.headers(headers).body(body).send() => sent,
                    () = progress.stalled(self.timeout) => {
                        self.stats.record_request(started.elapsed());
                        return Err(Failure::stalled(&object.at(), &self.url, self.timeout));
                    }
                }
            }
        };
        let result = match sent {
            Err(e) => Err(Failure::from_reqwest(&e)),
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(&response);
                // Reading the body lets the connection go back to the pool. The status is the
                // answer: a body that does not come within the timeout changes nothing.
                let body = tokio::time::timeout(self.timeout, response.bytes())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                if status.is_success() { Ok(()) } else { Err(self.refused(status, retry_after, &body)) }
            }
        };
        self.stats.record_request(started.elapsed());
        result
    }
}

impl HttpSink {
    /// A non-2xx answer, its body's head in the reason (for the dead-letter sink).
    pub(super) fn refused(&self, status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Failure {
        let snippet = String::from_utf8_lossy(&body[..body.len().min(REASON_BODY_BYTES)]);
        let reason = format!("HTTP {status} from {}: {}", self.url, snippet.trim());
        let kind = AttemptError::Status { code: status.as_u16(), retry_after };
        Failure { kind, reason, object_unreadable: false }
    }
}

/// The response's `Retry-After`, as a delay from now.
pub(super) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, now_ms())
}

impl Sink for HttpSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(join_all(records.iter().map(|r| self.deliver_one(r))))
    }

    fn epoch_support(&self) -> EpochSupport {
        EpochSupport::Idempotent
    }

    fn per_record(&self) -> bool {
        true
    }

    fn streams_objects(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<Arc<SinkStats>> {
        Some(self.stats.clone())
    }
}

/// When a streamed request last moved: the connection took a piece of the object, or the
/// body ended (then the answer is what is awaited).
#[derive(Clone)]
struct Progress(Arc<Mutex<Instant>>);

impl Default for Progress {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Instant::now())))
    }
}

impl Progress {
    fn moved(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).elapsed()
    }

    /// Resolves once nothing moved for `limit`.
    async fn stalled(&self, limit: Duration) {
        loop {
            let idle = self.idle();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

/// The object as a request body: each piece, and the end, marks `progress` when the connection
/// asks for it (it asks for the next piece once it has written the last).
fn streamed_body(reading: ObjectBody, progress: Progress) -> reqwest::Body {
    let pieces = futures::stream::unfold((reading, progress), |(mut reading, progress)| async move {
        let piece = reading.next_chunk().await;
        progress.moved();
        let piece = piece?.map_err(|e| std::io::Error::other(e.reason().to_owned()));
        Some((piece, (reading, progress)))
    });
    reqwest::Body::wrap_stream(pieces)
}

pub(super) struct Failure {
    pub(super) kind: AttemptError,
    pub(super) reason: String,
    /// The record's streamed object is gone, unreadable or replaced: no retry helps.
    pub(super) object_unreadable: bool,
}

impl Failure {
    pub(super) fn from_reqwest(e: &reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            AttemptError::Timeout
        } else if e.is_connect() {
            AttemptError::Connect
        } else {
            AttemptError::Io
        };
        Self { kind, reason: format!("{e:#}"), object_unreadable: false }
    }

    /// Opening a streamed object failed: permanent failures reject the record, others retry.
    fn from_fetch(e: FetchError) -> Self {
        let object_unreadable = matches!(e, FetchError::Permanent(_));
        Self { kind: AttemptError::Io, reason: e.reason().to_owned(), object_unreadable }
    }

    /// A streamed request that made no progress for `limit`.
    fn stalled(object: &str, url: &Url, limit: Duration) -> Self {
        let ms = limit.as_millis();
        Self {
            kind: AttemptError::Timeout,
            reason: format!(
                "sending {object} to {url}: nothing moved for {ms} ms (the receiver took no bytes, S3 sent none, or no answer came after the body); http.timeoutMs bounds the time without progress of a streamed object"
            ),
            object_unreadable: false,
        }
    }

    pub(super) fn closed() -> Self {
        Self { kind: AttemptError::Io, reason: "sink is shutting down".into(), object_unreadable: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_spec_fields_are_named() {
        let spec = |url: &str| HttpSinkSpec {
            url: url.into(),
            timeout_ms: 100,
            concurrency: 1,
            headers: Default::default(),
            event_type: "t".into(),
            secret_refs: None,
            batch: None,
        };
        let policy = RetryPolicy::from_spec(&Default::default());
        let err = HttpSink::new("h", &spec("::"), policy.clone()).err().unwrap();
        assert_eq!(err.field, "http.url");
        let mut bad_header = spec("http://127.0.0.1:1/");
        bad_header.headers.insert("bad header".into(), "v".into());
        let err = HttpSink::new("h", &bad_header, policy.clone()).err().unwrap();
        assert_eq!(err.field, "http.headers.bad header");
        let zero = HttpSinkSpec { concurrency: 0, ..spec("http://127.0.0.1:1/") };
        assert_eq!(HttpSink::new("h", &zero, policy).err().unwrap().field, "http.concurrency");
    }
}
