//! What a queue's receives brought since the last look: the figures the poller count adapts to.
//!
//! Why on the queue: every poller of a queue adds to the same tally without a lock, and the task
//! that sizes the queue's pollers reads and resets it once a window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
pub struct ReceiveTally {
    receives: AtomicU64,
    messages: AtomicU64,
    /// Receives that brought messages, and their summed duration in microseconds.
    fruitful: AtomicU64,
    fruitful_micros: AtomicU64,
}

/// A window's figures, taken by [`ReceiveTally::take`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tallied {
    pub receives: u64,
    pub messages: u64,
    /// Mean duration of the receives that brought messages (zero if none did).
    pub round_trip: Duration,
}

impl ReceiveTally {
    /// One answered receive that took `took` and brought `messages`.
    pub fn record(&self, took: Duration, messages: usize) {
        self.receives.fetch_add(1, Ordering::Relaxed);
        if messages > 0 {
            self.messages.fetch_add(messages as u64, Ordering::Relaxed);
            self.fruitful.fetch_add(1, Ordering::Relaxed);
            self.fruitful_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// The figures since the last `take`, and start over.
    pub fn take(&self) -> Tallied {
        let receives = self.receives.swap(0, Ordering::Relaxed);
        let messages = self.messages.swap(0, Ordering::Relaxed);
        let fruitful = self.fruitful.swap(0, Ordering::Relaxed);
        let micros = self.fruitful_micros.swap(0, Ordering::Relaxed);
        let round_trip = Duration::from_micros(micros.checked_div(fruitful).unwrap_or(0));
        Tallied { receives, messages, round_trip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_means_and_resets() {
        let t = ReceiveTally::default();
        t.record(Duration::from_millis(20), 10);
        t.record(Duration::from_millis(40), 4);
        t.record(Duration::from_secs(20), 0);
        let w = t.take();
        assert_eq!((w.receives, w.messages, w.round_trip), (3, 14, Duration::from_millis(30)));
        assert_eq!(t.take(), Tallied::default());
    }
}
