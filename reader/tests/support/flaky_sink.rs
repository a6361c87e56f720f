//! An HTTP sink on loopback that can misbehave on purpose, and keeps the figures the load tests
//! check: distinct `ce-id`s, duplicates, refused and timed-out requests, and when each event landed.
//!
//! Why its own server: the claims under test are about what a receiver sees. "None lost" is the set
//! of ids accepted; "duplicates" are ids accepted more than once; a rate limit is deliveries per
//! second measured here, not the reader's word for it. Faults are drawn per request:
//! `fail_ratio` of requests get 503 and nothing is recorded; `slow_ratio` are recorded first and
//! answered only after `slow_ms` (past the reader's timeout, so the reader retries something the
//! receiver already has: the realistic source of duplicates); every accepted request can be held
//! `delay_ms` to keep messages in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub fail_ratio: f64,
    pub slow_ratio: f64,
    pub slow_ms: u64,
    pub delay_ms: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub requests: u64,
    pub refused_503: u64,
    pub answered_late: u64,
    pub accepted: u64,
    pub distinct: u64,
    pub duplicates: u64,
}

#[derive(Default)]
struct Book {
    seen: HashMap<String, u32>,
    arrivals: Vec<Instant>,
    figures: Figures,
}

#[derive(Clone)]
pub struct FlakySink {
    faults: Faults,
    book: Arc<Mutex<Book>>,
}

impl FlakySink {
    /// Serve on 127.0.0.1 (a free port); returns the sink and the URL for the reader.
    pub async fn start(faults: Faults) -> (Self, String) {
        let sink = Self { faults, book: Arc::default() };
        let app = Router::new().fallback(receive).with_state(sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr: SocketAddr = listener.local_addr().expect("bound address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (sink, format!("http://{addr}/"))
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn figures(&self) -> Figures {
        self.book().figures
    }

    pub fn ids(&self) -> std::collections::BTreeSet<String> {
        self.book().seen.keys().cloned().collect()
    }

    /// Accepted deliveries that arrived in `[from, from + window)`, and the first arrival.
    pub fn arrivals_between(&self, from: Instant, window: Duration) -> usize {
        self.book().arrivals.iter().filter(|t| **t >= from && **t < from + window).count()
    }

    pub fn first_arrival(&self) -> Option<Instant> {
        self.book().arrivals.first().copied()
    }

    /// Wait (bounded) until `distinct` ids have been accepted; the figures then.
    pub async fn wait_distinct(&self, distinct: u64, within: Duration) -> Figures {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let figures = self.figures();
            if figures.distinct >= distinct || tokio::time::Instant::now() >= deadline {
                return figures;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn record(&self, id: String) {
        let mut book = self.book();
        let times = book.seen.entry(id).or_default();
        *times += 1;
        let duplicate = *times > 1;
        book.arrivals.push(Instant::now());
        book.figures.accepted += 1;
        if duplicate {
            book.figures.duplicates += 1;
        } else {
            book.figures.distinct += 1;
        }
    }
}

async fn receive(State(sink): State<FlakySink>, headers: HeaderMap, _body: Bytes) -> StatusCode {
    let Some(id) = headers.get("ce-id").and_then(|v| v.to_str().ok()).map(str::to_owned) else {
        return StatusCode::BAD_REQUEST;
    };
    sink.book().figures.requests += 1;
    let faults = sink.faults;
    let draw = fastrand::f64();
    if draw < faults.fail_ratio {
        sink.book().figures.refused_503 += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if faults.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.delay_ms)).await;
    }
    sink.record(id);
    if draw < faults.fail_ratio + faults.slow_ratio {
        sink.book().figures.answered_late += 1;
        tokio::time::sleep(Duration::from_millis(faults.slow_ms)).await;
    }
    StatusCode::OK
}
