//! The rate limiter: messages per second and bytes per second, with a burst.
//!
//! Why swappable: the limit in the spec is for the whole source and the operator hands each
//! replica its share, which changes as replicas come and go. `set_rate` builds fresh governor
//! buckets and swaps them in; waits already under way finish against the buckets they started
//! with, every later wait sees the new rate. No limit set means no waiting at all.
//!
//! Why waits pass in turn: governor wakes whichever waiter polls first, so under a tight limit a
//! batch could wait behind batches received after it. Under exactlyOnce that holds an epoch open
//! (it closes only when every message received in it is settled); taking turns in arrival order
//! bounds a batch's wait by what was received before it.

use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

use governor::{DefaultDirectRateLimiter, Quota};

use crate::config::settings::RateSettings;
use crate::process::metrics::Metrics;

/// Sets the gauges `sluice_reader_rate_limit_{messages,bytes}_per_second` to `rate` (0: no limit):
/// the limit this replica applies, which in a cluster is its share of the source's.
pub fn publish(metrics: &Metrics, rate: RateSettings) {
    metrics.rate_limit_messages.set(rate.messages_per_second.map_or(0, i64::from));
    metrics.rate_limit_bytes.set(rate.bytes_per_second.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)));
}

/// A governor bucket and its size (governor does not say it, and `take` needs it).
#[derive(Clone)]
struct Bucket {
    cells: Arc<DefaultDirectRateLimiter>,
    capacity: u32,
}

#[derive(Default)]
struct Buckets {
    messages: Option<Bucket>,
    bytes: Option<Bucket>,
}

pub struct Limiter {
    buckets: RwLock<Buckets>,
    rate: RwLock<RateSettings>,
    /// Waits for the buckets, first come first served (tokio's mutex queues its waiters).
    turn: tokio::sync::Mutex<()>,
}

impl Limiter {
    pub fn new(rate: RateSettings) -> Self {
        let limiter = Self { buckets: RwLock::default(), rate: RwLock::new(rate), turn: Default::default() };
        limiter.set_rate(rate);
        limiter
    }

    /// Replace the rate (this replica's share). Takes effect for the next `acquire`.
    pub fn set_rate(&self, rate: RateSettings) {
        let burst = rate.burst_seconds.max(1);
        let buckets = Buckets {
            messages: rate.messages_per_second.and_then(|r| bucket(u64::from(r), burst)),
            bytes: rate.bytes_per_second.and_then(|r| bucket(r, burst)),
        };
        *self.buckets.write().unwrap_or_else(|e| e.into_inner()) = buckets;
        *self.rate.write().unwrap_or_else(|e| e.into_inner()) = rate;
    }

    pub fn rate(&self) -> RateSettings {
        *self.rate.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until `messages` messages totalling `bytes` bytes may pass.
    pub async fn acquire(&self, messages: usize, bytes: usize) {
        let (m, b) = {
            let buckets = self.buckets.read().unwrap_or_else(|e| e.into_inner());
            (buckets.messages.clone(), buckets.bytes.clone())
        };
        if m.is_none() && b.is_none() {
            return;
        }
        let _turn = self.turn.lock().await;
        if let Some(m) = m {
            take(&m, messages as u64).await;
        }
        if let Some(b) = b {
            take(&b, bytes as u64).await;
        }
    }
}

/// A bucket refilling `per_second` cells a second, holding `burst_seconds` seconds' worth.
fn bucket(per_second: u64, burst_seconds: u32) -> Option<Bucket> {
    let rate = NonZeroU32::new(u32::try_from(per_second).unwrap_or(u32::MAX))?;
    let burst = NonZeroU32::new(rate.get().saturating_mul(burst_seconds)).unwrap_or(rate);
    let cells = Arc::new(DefaultDirectRateLimiter::direct(Quota::per_second(rate).allow_burst(burst)));
    Some(Bucket { cells, capacity: burst.get() })
}

/// Take `n` cells, in pieces no larger than the bucket, so a large message still passes (after
/// waiting for its full size) rather than failing with insufficient capacity.
async fn take(bucket: &Bucket, mut n: u64) {
    while n > 0 {
        let piece = n.min(u64::from(bucket.capacity));
        if let Some(cells) = NonZeroU32::new(piece as u32) {
            // Cannot fail: `piece` is at most the capacity.
            let _ = bucket.cells.until_n_ready(cells).await;
        }
        n -= piece;
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn gauges_show_the_applied_share() {
        let metrics = Metrics::new();
        publish(
            &metrics,
            RateSettings { messages_per_second: Some(20), bytes_per_second: None, burst_seconds: 1 },
        );
        let text = metrics.encode();
        assert!(text.contains("sluice_reader_rate_limit_messages_per_second 20"), "{text}");
        assert!(text.contains("sluice_reader_rate_limit_bytes_per_second 0"), "{text}");
    }

    fn rate(mps: Option<u32>, bps: Option<u64>) -> RateSettings {
        RateSettings { messages_per_second: mps, bytes_per_second: bps, burst_seconds: 1 }
    }

    #[tokio::test]
    async fn no_limit_never_waits() {
        let limiter = Limiter::new(rate(None, None));
        let start = Instant::now();
        for _ in 0..1000 {
            limiter.acquire(10, 1 << 20).await;
        }
        assert!(start.elapsed() < Duration::from_millis(200));
    }

    #[tokio::test]
    async fn messages_past_the_burst_wait_for_the_rate() {
        let limiter = Limiter::new(rate(Some(100), None));
        let start = Instant::now();
        limiter.acquire(100, 0).await; // the burst
        assert!(start.elapsed() < Duration::from_millis(50));
        limiter.acquire(30, 0).await; // 30 more at 100/s: about 300 ms
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(250) && waited < Duration::from_millis(600), "{waited:?}");
    }

    #[tokio::test]
    async fn a_message_larger_than_the_byte_burst_still_passes() {
        let limiter = Limiter::new(rate(None, Some(1000)));
        let start = Instant::now();
        limiter.acquire(1, 1500).await; // 1000 from the burst, 500 more at 1000/s
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(400) && waited < Duration::from_millis(900), "{waited:?}");
    }

    #[tokio::test]
    async fn set_rate_changes_the_limit_while_running() {
        let limiter = Limiter::new(rate(Some(10), None));
        limiter.acquire(10, 0).await;
        limiter.set_rate(rate(Some(1000), None));
        assert_eq!(limiter.rate().messages_per_second, Some(1000));
        let start = Instant::now();
        limiter.acquire(500, 0).await;
        assert!(start.elapsed() < Duration::from_millis(100), "the new, larger bucket starts full");
        limiter.set_rate(rate(None, None));
        limiter.acquire(1_000_000, 0).await;
    }

    #[tokio::test]
    async fn waits_pass_in_arrival_order() {
        let limiter = Arc::new(Limiter::new(rate(Some(20), None)));
        limiter.acquire(20, 0).await; // the burst: the next waits each take about half a second
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waits = Vec::new();
        for i in 0..4 {
            let (limiter, order) = (limiter.clone(), order.clone());
            waits.push(tokio::spawn(async move {
                limiter.acquire(10, 0).await;
                order.lock().unwrap().push(i);
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for w in waits {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn capacity_is_the_burst() {
        let b = bucket(50, 3).unwrap();
        assert_eq!(b.capacity, 150);
        assert!(b.cells.check_n(NonZeroU32::new(150).unwrap()).is_ok());
        assert!(b.cells.check_n(NonZeroU32::new(151).unwrap()).is_err(), "more than the burst never fits");
        assert!(bucket(0, 1).is_none());
    }
}
