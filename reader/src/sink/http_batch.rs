//! The `http` sink in batch mode (`http.batch`): many records, one POST of
//! `application/cloudevents-batch+json`, and the receiver's answer per event.
//!
//! Why gathered in the sink and not per receive batch: a receive brings at most 10 messages, and
//! a batch of 100 is worth having; so each record's delivery (the dispatcher hands an http sink
//! records one by one) puts its event on one queue, and one gathering task per sink makes
//! batches from whatever arrives, from every poller: a batch goes when it holds `maxEvents`, when
//! the next event would take its body past `maxBytes` (that event starts the next batch; an event
//! larger than `maxBytes` goes alone), or `maxWaitMilliseconds` after its first event. Each batch
//! is sent under one permit of the sink's concurrency limit, in a task of its own.
//!
//! Each record's delivery then waits for its own event's result and runs the sink's retry policy
//! for it, as binary mode does per request (`Attempts`): an event the receiver names in
//! `batchItemFailures` (`http_batch_answer`) is retried with backoff in a later batch, and once
//! the attempts run out it is rejected with the receiver's reason (the dead-letter route); an
//! event delivered is settled and never sent again. A whole batch that fails follows binary
//! mode's rules for each of its events: a 5xx, 408, 429, timeout or connection fault is the
//! sink's (retried, then held, never costing a receive), another 4xx the events' (rejected). A
//! 2xx answer that cannot be read fails the whole batch for the receiver's fault, with a WARN
//! line naming the problem.
//!
//! Exactly-once is unchanged: each event's `id` is its SQS MessageId, the key binary mode sends
//! as `ce-id`, and a record counts towards its epoch only when its own result is in, so an
//! epoch's ack waits for the batches holding its records. A streamed object
//! (`Record::object`) is not put in a batch: it is sent alone in binary mode, as it arrives.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, join_all};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use sluice_crds::HttpBatchSpec;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::error::SinkBuildError;
use super::fault::Fault;
use super::http::{Failure, HttpSink, retry_after};
use super::http_batch_answer::{BadAnswer, FailedItem, failed_items};
use super::http_batch_event::{BATCH_CONTENT_TYPE, added_bytes, batch_body, encode};
use super::retry::{AttemptError, Attempts, Class, GiveUp};
use super::{EpochSupport, Outcome, Sink};
use crate::process::batch_stats::{ItemFailure, MAX_EVENTS};
use crate::process::sink_stats::SinkStats;
use crate::record::Record;

pub struct HttpBatchSink {
    http: Arc<HttpSink>,
    shape: Shape,
    queue: mpsc::UnboundedSender<Entry>,
    /// The gathering task's end of the queue, until the first record starts the task (building
    /// a sink needs no runtime; delivering does).
    gather: Mutex<Option<mpsc::UnboundedReceiver<Entry>>>,
}

/// When a batch goes (`http.batch`).
#[derive(Clone, Copy, Debug)]
struct Shape {
    max_events: usize,
    max_bytes: usize,
    max_wait: Duration,
}

/// One event waiting for a batch, and where its result goes.
struct Entry {
    id: String,
    event: Bytes,
    answer: oneshot::Sender<EventResult>,
}

/// What became of one event of a batch.
#[derive(Clone, Debug)]
enum EventResult {
    Delivered,
    /// Named in `batchItemFailures`, with the receiver's reason.
    Failed(String),
    /// The whole batch failed (status, transport, an answer that could not be read).
    Batch {
        kind: AttemptError,
        reason: String,
    },
}

impl HttpBatchSink {
    /// Batch mode over `http` (its client, limit, retry policy and stop); errors name fields
    /// below `http.batch`.
    pub fn new(http: HttpSink, spec: &HttpBatchSpec) -> Result<Self, SinkBuildError> {
        let max_events = usize::try_from(spec.max_events).unwrap_or(usize::MAX);
        if !(1..=MAX_EVENTS).contains(&max_events) {
            let got = spec.max_events;
            return Err(SinkBuildError::new(
                "http.batch.maxEvents",
                format!("must be 1-{MAX_EVENTS} (got {got})"),
            ));
        }
        if !(1024..=16 << 20).contains(&spec.max_bytes) {
            let got = spec.max_bytes;
            return Err(SinkBuildError::new(
                "http.batch.maxBytes",
                format!("must be 1024-16777216 (got {got})"),
            ));
        }
        if spec.max_wait_milliseconds > 10_000 {
            let got = spec.max_wait_milliseconds;
            return Err(SinkBuildError::new(
                "http.batch.maxWaitMilliseconds",
                format!("must be 0-10000 (got {got})"),
            ));
        }
        let shape = Shape {
            max_events,
            max_bytes: usize::try_from(spec.max_bytes).unwrap_or(usize::MAX),
            max_wait: Duration::from_millis(u64::from(spec.max_wait_milliseconds)),
        };
        let (queue, gather) = mpsc::unbounded_channel();
        Ok(Self { http: Arc::new(http), shape, queue, gather: Mutex::new(Some(gather)) })
    }

    async fn deliver_one(&self, record: &Record) -> Outcome {
        if record.object.is_some() {
            return self.http.deliver_one(record).await;
        }
        if self.http.stopping.is_cancelled() {
            return Outcome::NotStarted;
        }
        let event = encode(record, &self.http.event_type);
        let mut attempts = Attempts::new(&self.http.policy, &self.http.stats);
        loop {
            let (class, fault, reason) = match self.submit(&record.message_id, event.clone()).await {
                EventResult::Delivered => return Outcome::Delivered,
                EventResult::Failed(reason) => {
                    let reason = format!(
                        "the receiver at {} failed event {} of its batch: {reason}",
                        self.http.url, record.message_id
                    );
                    (Class::Transient { hint: None }, Fault::Record, reason)
                }
                EventResult::Batch { kind, reason } => {
                    (self.http.policy.classify(&kind), kind.fault(), reason)
                }
            };
            let reason = match attempts.failed(class) {
                Ok(delay) => {
                    tracing::debug!(sink = %self.http.name, message_id = %record.message_id, %reason, ?delay, "retrying in a later batch");
                    tokio::time::sleep(delay).await;
                    continue;
                }
                Err(GiveUp::Permanent) => reason,
                Err(GiveUp::Exhausted { attempts }) => {
                    format!("{reason} (gave up after {attempts} attempts)")
                }
            };
            return match fault {
                Fault::Record => Outcome::Rejected { reason },
                Fault::Sink => Outcome::Failed { reason },
            };
        }
    }

    /// Put the event on the gathering queue and wait for its result.
    async fn submit(&self, id: &str, event: Bytes) -> EventResult {
        let waiting = self.gather.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(queue) = waiting {
            tokio::spawn(gather(self.http.clone(), self.shape, queue));
        }
        let (answer, result) = oneshot::channel();
        if self.queue.send(Entry { id: id.to_owned(), event, answer }).is_err() {
            return closed();
        }
        result.await.unwrap_or_else(|_| closed())
    }
}

fn closed() -> EventResult {
    let Failure { kind, reason, .. } = Failure::closed();
    EventResult::Batch { kind, reason }
}

/// The gathering task: batches from the queue, each sent in a task of its own under a permit.
/// It ends when the sink is dropped.
async fn gather(http: Arc<HttpSink>, shape: Shape, mut queue: mpsc::UnboundedReceiver<Entry>) {
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(entry) => entry,
            None => match queue.recv().await {
                Some(entry) => entry,
                None => return,
            },
        };
        let (batch, next) = fill(first, &mut queue, shape, &http.stopping).await;
        carried = next;
        match http.limit.clone().acquire_owned().await {
            Ok(permit) => drop(tokio::spawn(send(http.clone(), batch, permit))),
            Err(_) => answer_all(batch, &closed()),
        }
    }
}

/// A batch starting with `first`: events taken until it is full, the wait is over, or the reader
/// stops (then only what is queued already). The event that did not fit comes back.
async fn fill(
    first: Entry,
    queue: &mut mpsc::UnboundedReceiver<Entry>,
    shape: Shape,
    stopping: &CancellationToken,
) -> (Vec<Entry>, Option<Entry>) {
    let deadline = tokio::time::Instant::now() + shape.max_wait;
    let mut bytes = 1 + added_bytes(&first.event);
    let mut batch = vec![first];
    while batch.len() < shape.max_events && bytes < shape.max_bytes {
        let next = tokio::select! {
            biased;
            next = queue.recv() => next,
            () = tokio::time::sleep_until(deadline) => None,
            () = stopping.cancelled() => queue.try_recv().ok(),
        };
        let Some(next) = next else { break };
        if bytes + added_bytes(&next.event) > shape.max_bytes {
            return (batch, Some(next));
        }
        bytes += added_bytes(&next.event);
        batch.push(next);
    }
    (batch, None)
}

fn answer_all(batch: Vec<Entry>, result: &EventResult) {
    for entry in batch {
        // The record's delivery may be gone (the reader stopped): nobody waits for the answer.
        let _ = entry.answer.send(result.clone());
    }
}

/// Send one batch and hand each event its result.
async fn send(http: Arc<HttpSink>, batch: Vec<Entry>, _permit: OwnedSemaphorePermit) {
    let started = Instant::now();
    let body = batch_body(batch.iter().map(|e| &e.event));
    let ids: Vec<&str> = batch.iter().map(|e| e.id.as_str()).collect();
    let answer = post(&http, body, &ids).await;
    http.stats.record_request(started.elapsed());
    http.stats.batches.record_batch(batch.len());
    match answer {
        Ok(failed) => {
            http.stats.batches.record_failed(ItemFailure::Receiver, failed.len());
            let mut results = vec![EventResult::Delivered; batch.len()];
            for (index, reason) in failed {
                results[index] = EventResult::Failed(reason);
            }
            for (entry, result) in batch.into_iter().zip(results) {
                let _ = entry.answer.send(result);
            }
        }
        Err((failure, why)) => {
            http.stats.batches.record_failed(why, batch.len());
            answer_all(batch, &EventResult::Batch { kind: failure.kind, reason: failure.reason });
        }
    }
}

/// One POST of a batch: the events the receiver failed, or why the whole batch failed.
async fn post(http: &HttpSink, body: Bytes, ids: &[&str]) -> Result<Vec<FailedItem>, (Failure, ItemFailure)> {
    let mut headers = http.extra_headers.clone();
    for secret in &http.secret_headers {
        headers.insert(secret.name.clone(), secret.value());
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(BATCH_CONTENT_TYPE));
    let request = http.client.post(http.url.clone()).headers(headers).timeout(http.timeout).body(body);
    let response = request.send().await.map_err(|e| (Failure::from_reqwest(&e), ItemFailure::BatchFailed))?;
    let status = response.status();
    let retry_after = retry_after(&response);
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = tokio::time::timeout(http.timeout, response.bytes()).await;
    if !status.is_success() {
        let body = body.ok().and_then(Result::ok).unwrap_or_default();
        let failure = http.refused(status, retry_after, &body);
        let why = match failure.kind.fault() {
            Fault::Record => ItemFailure::BatchRejected,
            Fault::Sink => ItemFailure::BatchFailed,
        };
        return Err((failure, why));
    }
    let answer = match body {
        Ok(Ok(body)) => failed_items(content_type.as_deref(), &body, ids),
        _ => Err(BadAnswer("the answer's body did not arrive within http.timeoutMs".to_owned())),
    };
    answer.map_err(|BadAnswer(problem)| {
        let reason = format!(
            "HTTP {status} from {} to a batch of {} events: {problem}; every event of the batch is sent again",
            http.url,
            ids.len()
        );
        if let Some(count) = http.warnings.due(&http.name, "bad_batch_answer") {
            let sink = http.name.as_str();
            tracing::warn!(sink, count, "sink {sink}: {count} batch answers not understood in up to 10 s, so their batches count as failed: {reason}; answer 2xx with an empty body, or {{\"batchItemFailures\":[{{\"itemIdentifier\":\"<event id>\",\"reason\":\"...\"}}]}} naming events of the batch");
        }
        (Failure { kind: AttemptError::ServiceFault, reason, object_unreadable: false }, ItemFailure::BadAnswer)
    })
}

impl Sink for HttpBatchSink {
    fn name(&self) -> &str {
        &self.http.name
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
        Some(self.http.stats.clone())
    }
}

#[cfg(test)]
#[path = "http_batch_tests.rs"]
mod tests;
