//! Real round trips for the bench: the harness's latency proxy in front of LocalStack (and of the
//! sink), and a count of the SQS calls each consumer makes through it.
//!
//! Why count at the proxy: both consumers are counted the same way, from the bytes they send,
//! without trusting either one's own metrics. The SDK's JSON protocol names the action in one
//! header (`x-amz-target: AmazonSQS.ReceiveMessage`), so a substring count per chunk is enough.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[path = "../../../tests/src/latency_proxy.rs"]
#[allow(dead_code)]
pub mod latency_proxy;

pub use latency_proxy::{Delay, LatencyProxy, Watch};

use crate::exchanges::Exchanges;
use crate::runtimes::Runtimes;

/// What a consumer's proxy counts (its SQS calls by action) and times (its receives' legs).
#[derive(Default)]
pub struct Watched {
    pub calls: SqsCalls,
    pub exchanges: Exchanges,
}

/// SQS calls seen on the way in, by action.
#[derive(Default)]
pub struct SqsCalls {
    receive: AtomicU64,
    delete: AtomicU64,
    visibility: AtomicU64,
    other: AtomicU64,
}

/// A snapshot of [`SqsCalls`].
#[derive(Clone, Copy, Default, Debug)]
pub struct Calls {
    pub receive: u64,
    pub delete: u64,
    pub visibility: u64,
    pub other: u64,
}

impl Calls {
    pub fn total(&self) -> u64 {
        self.receive + self.delete + self.visibility + self.other
    }
}

const TARGET: &[u8] = b"AmazonSQS.";

impl SqsCalls {
    fn observe(&self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(at) = find(rest, TARGET) {
            let action = &rest[at + TARGET.len()..];
            let counter = if action.starts_with(b"ReceiveMessage") {
                &self.receive
            } else if action.starts_with(b"DeleteMessage") {
                &self.delete
            } else if action.starts_with(b"ChangeMessageVisibility") {
                &self.visibility
            } else {
                &self.other
            };
            counter.fetch_add(1, Ordering::Relaxed);
            rest = action;
        }
    }

    pub fn snapshot(&self) -> Calls {
        Calls {
            receive: self.receive.load(Ordering::Relaxed),
            delete: self.delete.load(Ordering::Relaxed),
            visibility: self.visibility.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A proxy adding `rtt` (10% jitter, shaped as `runtimes` says) in front of `upstream`, on
/// `runtimes.proxy`, counting and timing SQS calls into `watched`.
pub fn proxy(
    runtimes: &Runtimes,
    upstream: &str,
    rtt: Duration,
    watched: Option<Arc<Watched>>,
) -> Result<LatencyProxy, String> {
    let addr = upstream_addr(upstream)?;
    let watch = match watched {
        None => Watch::default(),
        Some(w) => {
            let counted = w.clone();
            Watch {
                tap: Some(Arc::new(move |chunk: &[u8]| counted.calls.observe(chunk))),
                stamps: Some(Arc::new(move |stamp: &latency_proxy::Stamp<'_>| w.exchanges.observe(stamp))),
            }
        }
    };
    LatencyProxy::start_on(&runtimes.proxy, addr, runtimes.delay(rtt), watch)
        .map_err(|e| format!("latency proxy in front of {upstream}: {e}"))
}

/// The reader's poller count at the end of a run: the last `to=` of its "pollers resized" log
/// lines (text format), summed over its queues; `None` if it never resized.
pub fn pollers_chosen(log: &str) -> Option<usize> {
    let mut per_queue: std::collections::BTreeMap<&str, usize> = Default::default();
    for line in log.lines().filter(|l| l.contains("pollers resized")) {
        let field = |name: &str| line.split_whitespace().find_map(|w| w.strip_prefix(name));
        if let (Some(queue), Some(to)) = (field("queue="), field("to=").and_then(|t| t.parse().ok())) {
            per_queue.insert(queue, to);
        }
    }
    (!per_queue.is_empty()).then(|| per_queue.values().sum())
}

/// What the reader's "pollers window" debug lines (one a second per queue, text format) say over
/// the windows that brought messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Windows {
    /// The mean poller count (one queue is what the bench runs).
    pub pollers: f64,
    /// The mean time per receive, weighted by the messages of each window.
    pub receive_ms: f64,
    /// Share of the pollers' time spent waiting for room or for the rate limit: receives held
    /// back by delivery or settling rather than by the round trip.
    pub waited: f64,
    /// The count window by window, e.g. `4 4 5 4`.
    pub counts: String,
}

/// The reader's windows that brought messages; `None` if it logged none (a reader built before
/// those lines).
pub fn pollers_windows(log: &str) -> Option<Windows> {
    let (mut windows, mut pollers, mut messages, mut weighted_ms, mut waited_ms) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut counts = Vec::new();
    for line in log.lines().filter(|l| l.contains("pollers window")) {
        let field = |name: &str| {
            line.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse::<f64>().ok())
        };
        let (Some(p), Some(m), Some(ms)) = (field("pollers="), field("messages="), field("round_trip_ms="))
        else {
            continue;
        };
        if m > 0.0 {
            (windows, pollers, messages, weighted_ms) =
                (windows + 1.0, pollers + p, messages + m, weighted_ms + m * ms);
            waited_ms += field("room_wait_ms=").unwrap_or(0.0) + field("rate_wait_ms=").unwrap_or(0.0);
            counts.push(p.to_string());
        }
    }
    (windows > 0.0).then(|| Windows {
        pollers: pollers / windows,
        receive_ms: weighted_ms / messages,
        waited: waited_ms / (pollers * 1000.0),
        counts: counts.join(" "),
    })
}

/// `http://127.0.0.1:4566/...` -> 127.0.0.1:4566.
fn upstream_addr(url: &str) -> Result<SocketAddr, String> {
    let rest = url.split("://").nth(1).ok_or_else(|| format!("{url} is not a URL"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.replace("localhost", "127.0.0.1");
    authority.parse().map_err(|e| format!("{url}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_actions_in_a_chunk() {
        let calls = SqsCalls::default();
        calls.observe(b"POST / HTTP/1.1\r\nx-amz-target: AmazonSQS.ReceiveMessage\r\n\r\n{}POST / HTTP/1.1\r\nx-amz-target: AmazonSQS.DeleteMessageBatch\r\n");
        let c = calls.snapshot();
        assert_eq!((c.receive, c.delete, c.visibility, c.other), (1, 1, 0, 0));
        assert_eq!(upstream_addr("http://localhost:4566/x").unwrap().port(), 4566);
    }

    #[test]
    fn reads_the_readers_poller_windows() {
        let log = "t DEBUG x: pollers window queue=q pollers=4 messages=400 round_trip_ms=100.0 room_wait_ms=0\n\
                   t DEBUG x: pollers window queue=q pollers=6 messages=600 round_trip_ms=50.0 room_wait_ms=0\n\
                   t DEBUG x: pollers window queue=q pollers=8 messages=0 round_trip_ms=0 room_wait_ms=0\n";
        let w = pollers_windows(log).unwrap();
        assert_eq!(w.pollers, 5.0, "windows without messages do not count");
        assert_eq!(w.receive_ms, 70.0, "weighted by messages");
        assert_eq!((w.waited, w.counts.as_str()), (0.0, "4 6"));
        assert_eq!(pollers_windows("pollers resized queue=q from=4 to=5"), None);
    }
}
