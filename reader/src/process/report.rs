//! What the reader's report measures as it runs: how long its messages waited, how old the oldest
//! it received was, its drain rate and its AWS requests per message. The stages write them as they
//! happen (the pollers at each receive and hand-off, the heartbeat at each beat); each written
//! report takes the waits and ages and starts them afresh, so that it covers the last interval.
//! `settle::held_report` adds what the reader holds and writes the report.
//!
//! Two waits: from the receive to the hand-off to the sinks (the reader's own wait, mostly the rate
//! limit's), and the delivery wait, from the message's SentTimestamp to that hand-off (the queue's
//! wait plus the reader's, what a latency target is about).
//!
//! Why here, one per reader beside its metrics: every writer already holds the metrics, and two
//! readers in one process (the tests) must not share a report.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::wait_quantiles::Quantiles;

/// Waits and ages since the last report.
#[derive(Clone, Default)]
pub struct Window {
    pub count: u64,
    pub sum: Duration,
    pub max: Duration,
    /// The oldest message's age at receive, milliseconds.
    pub oldest_age_ms: Option<u64>,
    pub delivery_wait: Quantiles,
}

/// The two rates the heartbeat measures: the drain rate (thousandths of a message per second)
/// and the AWS requests per 1,000 delivered messages (`None`: none delivered in its window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    pub drain: u64,
    pub cost: Option<u64>,
}

/// The figures since the last report.
pub struct Measured {
    window: Mutex<Window>,
    drain: AtomicU64,
    /// AWS requests per 1,000 delivered messages; `u64::MAX`: none delivered.
    cost: AtomicU64,
}

impl Default for Measured {
    fn default() -> Self {
        Self { window: Mutex::default(), drain: AtomicU64::new(0), cost: AtomicU64::new(u64::MAX) }
    }
}

impl Measured {
    fn window<T>(&self, f: impl FnOnce(&mut Window) -> T) -> T {
        f(&mut self.window.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The heartbeat's drain rate, in thousandths of a message per second.
    pub fn drained(&self, drain_millis_per_second: u64) {
        self.drain.store(drain_millis_per_second, Ordering::Relaxed);
    }

    /// The heartbeat's requests per delivered message over its cost window (`None`: nothing was
    /// delivered in it).
    pub fn cost(&self, requests_per_message: Option<f64>) {
        let per_thousand = requests_per_message.map_or(u64::MAX, |r| (r * 1000.0).round() as u64);
        self.cost.store(per_thousand, Ordering::Relaxed);
    }

    /// A batch was received at `now_ms`, its messages sent at `sent_ms` (the SentTimestamps known).
    pub fn received(&self, sent_ms: &[i64], now_ms: i64) {
        let Some(&oldest) = sent_ms.iter().min() else { return };
        let age = u64::try_from(now_ms.saturating_sub(oldest)).unwrap_or(0);
        self.window(|w| w.oldest_age_ms = Some(w.oldest_age_ms.map_or(age, |a| a.max(age))));
    }

    /// Messages sent at `sent_ms` (`None`: SentTimestamp unknown) waited `waited` from their
    /// receive to their hand-off to the sinks, which is `now_ms`.
    pub fn waited(&self, sent_ms: impl IntoIterator<Item = Option<i64>>, waited: Duration, now_ms: i64) {
        self.window(|w| {
            for sent in sent_ms {
                w.count += 1;
                w.sum += waited;
                if let Some(sent) = sent {
                    w.delivery_wait.add(u64::try_from(now_ms.saturating_sub(sent)).unwrap_or(0), 1);
                }
            }
            w.max = w.max.max(waited);
        });
    }

    pub fn rates(&self) -> Rates {
        let cost = Some(self.cost.load(Ordering::Relaxed)).filter(|c| *c != u64::MAX);
        Rates { drain: self.drain.load(Ordering::Relaxed), cost }
    }

    /// The oldest age at receive since the last report, milliseconds (0: none received).
    pub fn oldest_age_ms(&self) -> u64 {
        self.window(|w| w.oldest_age_ms.unwrap_or(0))
    }

    /// The window since the last report, started afresh.
    pub fn take(&self) -> Window {
        self.window(std::mem::take)
    }
}
