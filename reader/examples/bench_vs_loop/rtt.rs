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
mod latency_proxy;

pub use latency_proxy::{Delay, LatencyProxy};

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

/// A proxy adding `rtt` (10% jitter) in front of `upstream`, counting SQS calls into `calls`.
pub async fn proxy(
    upstream: &str,
    rtt: Duration,
    calls: Option<Arc<SqsCalls>>,
) -> Result<LatencyProxy, String> {
    let addr = upstream_addr(upstream)?;
    let tap = calls.map(|c| Arc::new(move |chunk: &[u8]| c.observe(chunk)) as latency_proxy::Tap);
    LatencyProxy::start(addr, Delay::round_trip(rtt, 10), tap)
        .await
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

/// From the reader's "pollers window" debug lines (one a second per queue, text format), over the
/// windows that brought messages: the mean poller count (summed over queues per window would need
/// their timing; one queue is what the bench runs) and the mean time per receive, weighted by the
/// messages of each window. `None` if it logged none (a reader built before those lines).
pub fn pollers_windows(log: &str) -> Option<(f64, f64)> {
    let (mut windows, mut pollers, mut messages, mut weighted_ms) = (0.0, 0.0, 0.0, 0.0);
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
        }
    }
    (windows > 0.0).then(|| (pollers / windows, weighted_ms / messages))
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
        let (pollers, ms) = pollers_windows(log).unwrap();
        assert_eq!(pollers, 5.0, "windows without messages do not count");
        assert_eq!(ms, 70.0, "weighted by messages");
        assert_eq!(pollers_windows("pollers resized queue=q from=4 to=5"), None);
    }
}
