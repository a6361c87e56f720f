//! Counts a batching HTTP sink keeps about its batch requests, for the metrics to read.
//!
//! Why in `process`: like `SinkStats`, the metrics read them and the sinks only count, so the
//! sinks need not know the metrics library. Batch sizes are kept as one pending count per size
//! (a batch holds at most [`MAX_EVENTS`] events): the metrics take the pending counts at scrape
//! time and observe each size that many times, so the histogram is exact (its sum included) in
//! a fixed amount of memory however long nobody scrapes.

use std::sync::atomic::{AtomicU64, Ordering};

/// The most events one batch holds (`http.batch.maxEvents` is at most this).
pub const MAX_EVENTS: usize = 100;

/// Why events of a batch were not delivered: the reasons the failed-items metric counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemFailure {
    /// The receiver named the event in `batchItemFailures`.
    Receiver,
    /// The whole batch was refused with a 4xx (the events' fault).
    BatchRejected,
    /// The whole batch failed for the receiver's fault: 5xx, 408, 429, a timeout, a refused or
    /// reset connection.
    BatchFailed,
    /// The receiver's 2xx answer could not be read (not the documented JSON, an unknown
    /// `itemIdentifier`): the whole batch counts as failed.
    BadAnswer,
}

impl ItemFailure {
    pub const ALL: [ItemFailure; 4] =
        [ItemFailure::Receiver, ItemFailure::BatchRejected, ItemFailure::BatchFailed, ItemFailure::BadAnswer];

    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            ItemFailure::Receiver => "receiver",
            ItemFailure::BatchRejected => "batch_rejected",
            ItemFailure::BatchFailed => "batch_failed",
            ItemFailure::BadAnswer => "bad_answer",
        }
    }

    fn index(self) -> usize {
        match self {
            ItemFailure::Receiver => 0,
            ItemFailure::BatchRejected => 1,
            ItemFailure::BatchFailed => 2,
            ItemFailure::BadAnswer => 3,
        }
    }
}

#[derive(Debug)]
pub struct BatchStats {
    requests: AtomicU64,
    /// Batches of each size (index = events) not yet taken by the metrics.
    pending_sizes: Vec<AtomicU64>,
    failed: [AtomicU64; 4],
}

impl Default for BatchStats {
    fn default() -> Self {
        Self {
            requests: AtomicU64::new(0),
            pending_sizes: (0..=MAX_EVENTS).map(|_| AtomicU64::new(0)).collect(),
            failed: Default::default(),
        }
    }
}

impl BatchStats {
    /// One batch request of `events` events was sent (any answer).
    pub fn record_batch(&self, events: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let size = events.min(MAX_EVENTS);
        self.pending_sizes[size].fetch_add(1, Ordering::Relaxed);
    }

    /// `n` events of one batch were not delivered, for `why`.
    pub fn record_failed(&self, why: ItemFailure, n: usize) {
        self.failed[why.index()].fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Batch requests since the sink was built.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Failed events for `why` since the sink was built.
    pub fn failed(&self, why: ItemFailure) -> u64 {
        self.failed[why.index()].load(Ordering::Relaxed)
    }

    /// `(size, batches)` for every size with batches not taken yet; taking them resets them.
    pub fn take_sizes(&self) -> Vec<(usize, u64)> {
        let taken = self.pending_sizes.iter().map(|c| c.swap(0, Ordering::Relaxed));
        taken.enumerate().filter(|(_, n)| *n > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_taken_once_and_counts_accumulate() {
        let stats = BatchStats::default();
        stats.record_batch(10);
        stats.record_batch(10);
        stats.record_batch(3);
        stats.record_batch(500);
        stats.record_failed(ItemFailure::Receiver, 3);
        stats.record_failed(ItemFailure::Receiver, 2);
        assert_eq!(stats.take_sizes(), vec![(3, 1), (10, 2), (MAX_EVENTS, 1)]);
        assert!(stats.take_sizes().is_empty(), "taken sizes are not taken again");
        assert_eq!((stats.requests(), stats.failed(ItemFailure::Receiver)), (4, 5));
        assert_eq!(stats.failed(ItemFailure::BadAnswer), 0);
    }
}
