//! The HTTP sink both consumers post to: one server in the driver process, so neither consumer
//! pays for it in the CPU figures and both see the same receiver.
//!
//! It answers 200 to every CloudEvents request and counts distinct `ce-id`s (a run is done when all
//! of them arrived) and notes when the first one came (the start of the timed window). A body that
//! is a send time (microseconds since the Unix epoch, as `bench_cost` sends) also gives that
//! message's delivery latency, at its first arrival.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

#[derive(Default)]
struct Tally {
    ids: HashSet<String>,
    accepted: u64,
    first: Option<Instant>,
    /// Send to first arrival, in milliseconds, of the bodies that carry a send time.
    latencies_ms: Vec<f64>,
}

#[derive(Clone, Default)]
pub struct CountingSink {
    tally: Arc<Mutex<Tally>>,
}

impl CountingSink {
    /// Serve on 127.0.0.1 (a free port); returns the URL.
    pub async fn start(&self) -> std::io::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(receive).with_state(self.clone());
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(format!("http://{addr}/"))
    }

    fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forget the previous run.
    pub fn reset(&self) {
        *self.tally() = Tally::default();
    }

    /// (distinct ids, accepted requests, first arrival).
    pub fn figures(&self) -> (usize, u64, Option<Instant>) {
        let t = self.tally();
        (t.ids.len(), t.accepted, t.first)
    }
}

impl CountingSink {
    /// The delivery latency percentiles `ps` (0-100) in milliseconds; `None` without timed bodies.
    pub fn percentiles(&self, ps: &[f64]) -> Option<Vec<f64>> {
        let mut all = self.tally().latencies_ms.clone();
        if all.is_empty() {
            return None;
        }
        all.sort_by(f64::total_cmp);
        let at = |p: f64| all[((p / 100.0 * all.len() as f64).ceil() as usize).clamp(1, all.len()) - 1];
        Some(ps.iter().map(|p| at(*p)).collect())
    }
}

/// Microseconds since the Unix epoch: what a timed body carries.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Takes the body too, so every connection stays reusable (keep-alive) for both consumers.
async fn receive(State(sink): State<CountingSink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let Some(id) = headers.get("ce-id").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut tally = sink.tally();
    tally.first.get_or_insert_with(Instant::now);
    tally.accepted += 1;
    if !tally.ids.contains(id) {
        tally.ids.insert(id.to_owned());
        let sent = std::str::from_utf8(&body).ok().and_then(|b| b.trim().parse::<u64>().ok());
        if let Some(sent) = sent {
            tally.latencies_ms.push(now_us().saturating_sub(sent) as f64 / 1000.0);
        }
    }
    StatusCode::OK
}
