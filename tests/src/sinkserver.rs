//! An HTTP sink for tests and the demo: accepts CloudEvents binary-mode POSTs and counts what arrives.
//!
//! Why: the delivery guarantees are claims about what a sink sees. At-least-once means every sent
//! message shows up at least once (distinct ids = sent); exactly-once means no id shows up twice
//! (duplicates = 0). This server keeps both figures, keyed by `ce-id` (the SQS MessageId), so a test or
//! the demo can check them instead of trusting the reader's own metrics. It binds wherever it is told
//! (tests pass `127.0.0.1:0`) and keeps every event in memory in arrival order.
//!
//! It can also refuse on demand ([`SinkServer::refuse`]): a receiver that answers 4xx or 5xx to every
//! event, or only to poison bodies, until told to accept again. The failure tests need a sink that is
//! broken in a way they can switch off, to see the reader and the operator recover.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One accepted CloudEvent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `ce-id`: the SQS MessageId.
    pub id: String,
    /// `ce-source`: the queue URL.
    pub source: Option<String>,
    /// `ce-type`.
    pub event_type: Option<String>,
    /// The request body: the message payload.
    pub body: Bytes,
}

/// What the sink has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Requests accepted (2xx), duplicates included.
    pub accepted: u64,
    /// Distinct `ce-id` values accepted.
    pub distinct: u64,
    /// Accepted requests whose `ce-id` had been accepted before.
    pub duplicates: u64,
    /// Requests refused with 400 because they were not binary-mode CloudEvents.
    pub rejected: u64,
    /// Well-formed events answered with the status set by [`SinkServer::refuse`].
    pub refused: u64,
}

/// Which events the sink refuses, and with what status.
#[derive(Debug, Clone)]
struct Refusal {
    status: StatusCode,
    /// Only bodies containing this (empty: every body).
    marker: Vec<u8>,
}

#[derive(Default)]
struct Shared {
    record: Mutex<Record>,
    changed: Notify,
    /// How long each accepted request takes to answer (a receiver doing real work).
    latency: Duration,
    refusal: Mutex<Option<Refusal>>,
}

#[derive(Default)]
struct Record {
    times_seen: HashMap<String, u64>,
    events: Vec<Event>,
    stats: SinkStats,
}

impl Shared {
    /// The status to refuse `body` with, if the sink refuses it now.
    fn refusal_of(&self, body: &[u8]) -> Option<StatusCode> {
        let refusal = self.refusal.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let refusal = refusal.as_ref()?;
        let matches =
            refusal.marker.is_empty() || body.windows(refusal.marker.len()).any(|w| w == refusal.marker);
        matches.then_some(refusal.status)
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        // A panic while holding the lock leaves plain counters behind, still worth reading.
        self.record.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running sink; stop it with [`SinkServer::stop`] (dropping it leaves the server running until the
/// runtime ends).
pub struct SinkServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl SinkServer {
    /// Binds `addr` (`127.0.0.1:0` picks a free port) and starts serving.
    pub async fn start(addr: &str) -> Result<Self> {
        Self::start_with_latency(addr, Duration::ZERO).await
    }

    /// The same, answering each accepted event only after `latency`, as a receiver that does real
    /// work would: a reader's throughput is then bounded by its sink concurrency over `latency`,
    /// whatever the machine's speed (the demo uses this to make a burst outrun one reader).
    pub async fn start_with_latency(addr: &str, latency: Duration) -> Result<Self> {
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { latency, ..Shared::default() });
        let shutdown = CancellationToken::new();
        let app = Router::new().fallback(accept).with_state(shared.clone());
        let task = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                .into_future(),
        );
        Ok(Self { addr, shared, shutdown, task })
    }

    /// From now on answers `status` (4xx: a permanent refusal; 5xx: an outage) to every event whose
    /// body contains `marker` (an empty marker: every event), without recording it.
    pub fn refuse(&self, status: StatusCode, marker: &str) {
        let refusal = Refusal { status, marker: marker.as_bytes().to_vec() };
        *self.shared.refusal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(refusal);
    }

    /// From now on accepts every well-formed event again.
    pub fn accept_all(&self) {
        *self.shared.refusal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to give a reader's HTTP sink.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Counters so far.
    pub fn stats(&self) -> SinkStats {
        self.shared.lock().stats
    }

    /// Accepted events from position `start` on, in arrival order (pass the count already read).
    pub fn events_from(&self, start: usize) -> Vec<Event> {
        self.shared.lock().events.get(start..).map(<[Event]>::to_vec).unwrap_or_default()
    }

    /// Every accepted event, in arrival order.
    pub fn events(&self) -> Vec<Event> {
        self.events_from(0)
    }

    /// Waits until `distinct` different ids have arrived; fails with the figures seen after `timeout`.
    pub async fn wait_for_distinct(&self, distinct: u64, timeout: Duration) -> Result<SinkStats> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.shared.changed.notified();
            let stats = self.stats();
            if stats.distinct >= distinct {
                return Ok(stats);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                bail!(
                    "sink saw {} distinct ids within {timeout:?}, expected {distinct}: {stats:?}",
                    stats.distinct
                );
            }
        }
    }

    /// Stops accepting, finishes requests in progress, and returns the final counters.
    pub async fn stop(self) -> Result<SinkStats> {
        self.shutdown.cancel();
        let stats = self.shared.clone();
        self.task.await.context("sink server task panicked")?.context("sink server failed")?;
        Ok(stats.lock().stats)
    }
}

async fn accept(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (Some(id), Some("1.0")) = (header("ce-id"), header("ce-specversion").as_deref()) else {
        shared.lock().stats.rejected += 1;
        return (
            StatusCode::BAD_REQUEST,
            "expected a CloudEvents 1.0 binary-mode request (ce-id, ce-specversion)\n",
        );
    };
    if !shared.latency.is_zero() {
        tokio::time::sleep(shared.latency).await;
    }
    if let Some(status) = shared.refusal_of(&body) {
        shared.lock().stats.refused += 1;
        return (status, "refused by the test sink\n");
    }
    let event = Event { id, source: header("ce-source"), event_type: header("ce-type"), body };
    {
        let mut record = shared.lock();
        let seen = record.times_seen.entry(event.id.clone()).or_default();
        *seen += 1;
        let duplicate = *seen > 1;
        record.stats.accepted += 1;
        if duplicate {
            record.stats.duplicates += 1;
        } else {
            record.stats.distinct += 1;
        }
        record.events.push(event);
    }
    shared.changed.notify_waiters();
    (StatusCode::OK, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(client: &reqwest::Client, url: &str, id: Option<&str>) -> StatusCode {
        let mut request = client.post(url).body("payload");
        if let Some(id) = id {
            request = request.header("ce-id", id).header("ce-specversion", "1.0").header("ce-type", "t");
        }
        StatusCode::from_u16(request.send().await.expect("request sent").status().as_u16()).expect("status")
    }

    #[tokio::test]
    async fn counts_distinct_ids_and_duplicates_and_rejects_non_events() {
        let sink = SinkServer::start("127.0.0.1:0").await.expect("bound");
        let client = reqwest::Client::new();
        for id in ["a", "b", "a"] {
            assert_eq!(post(&client, &sink.url(), Some(id)).await, StatusCode::OK);
        }
        assert_eq!(post(&client, &sink.url(), None).await, StatusCode::BAD_REQUEST);

        let stats = sink.wait_for_distinct(2, Duration::from_secs(5)).await.expect("two ids");
        assert_eq!(stats, SinkStats { accepted: 3, distinct: 2, duplicates: 1, rejected: 1, refused: 0 });
        let events = sink.events();
        assert_eq!(events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["a", "b", "a"]);
        assert_eq!(events[0].body, Bytes::from_static(b"payload"));
        assert_eq!(sink.events_from(2).len(), 1);
        assert!(sink.wait_for_distinct(3, Duration::from_millis(100)).await.is_err());
        assert_eq!(sink.stop().await.expect("stopped").accepted, 3);
    }

    #[tokio::test]
    async fn refuses_marked_bodies_or_everything_until_told_to_accept() {
        let sink = SinkServer::start("127.0.0.1:0").await.expect("bound");
        let client = reqwest::Client::new();
        let post_body = |id: &'static str, body: &'static str| {
            let request = client.post(sink.url()).body(body);
            request.header("ce-id", id).header("ce-specversion", "1.0").send()
        };
        sink.refuse(StatusCode::BAD_REQUEST, "poison");
        assert_eq!(post_body("a", "poison pill").await.expect("sent").status().as_u16(), 400);
        assert_eq!(post_body("b", "fine").await.expect("sent").status().as_u16(), 200);
        sink.refuse(StatusCode::SERVICE_UNAVAILABLE, "");
        assert_eq!(post_body("c", "fine").await.expect("sent").status().as_u16(), 503);
        sink.accept_all();
        assert_eq!(post_body("a", "poison pill").await.expect("sent").status().as_u16(), 200);
        let stats = sink.stop().await.expect("stopped");
        assert_eq!((stats.accepted, stats.distinct, stats.refused), (2, 2, 2));
    }
}
