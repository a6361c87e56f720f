//! Counts of the objects the payload stage fetched, for the metrics to read at scrape time.
//!
//! Why in `process` and not in `payload`: the metrics read them, and the shared bottom imports no
//! stage; so the type sits below both, and the fetch path knows no metrics library.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts read by the metrics (`process::metrics::PayloadMetrics`) at scrape time.
#[derive(Default, Debug)]
pub struct FetchStats {
    pub objects: AtomicU64,
    pub bytes: AtomicU64,
    /// Bytes of fetched bodies alive now (fetched, not yet dropped by every sink).
    pub held_bytes: AtomicU64,
}

impl FetchStats {
    pub fn fetched(&self, bytes: u64) {
        self.objects.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.held_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A streamed object was read to its end by a sink (each sink's read counts).
    pub fn streamed(&self, bytes: u64) {
        self.objects.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}
