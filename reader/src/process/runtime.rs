//! The async runtime the reader runs on: tokio's multi-threaded scheduler with few workers.
//!
//! Why not one worker per core (tokio's default): a reader is I/O-bound (about 0.3 ms of CPU per
//! message in a release build, BENCHMARKS.md), runs as many small pods, and a pod without a CPU
//! limit sees every core of its node. Each worker holds resident memory of its own (its stack, its
//! allocator heap and what that heap keeps cached under load; idle, 16 workers held 1.2 MiB more
//! than 2), and spreading a few hundred messages a second over many threads only adds wake-ups.
//! A reader that needs more CPU scales out to more pods; `TOKIO_WORKER_THREADS`, tokio's own
//! variable, still sets the count when given.

use std::io;

use tokio::runtime::{Builder, Runtime};

/// Workers at most when `TOKIO_WORKER_THREADS` is not set.
pub const DEFAULT_MAX_WORKERS: usize = 2;

pub fn build() -> io::Result<Runtime> {
    let given = std::env::var("TOKIO_WORKER_THREADS").ok();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Builder::new_multi_thread().worker_threads(worker_threads(given.as_deref(), cores)).enable_all().build()
}

/// `TOKIO_WORKER_THREADS` when it is a positive number, else the available cores up to
/// [`DEFAULT_MAX_WORKERS`].
pub fn worker_threads(given: Option<&str>, cores: usize) -> usize {
    match given.and_then(|g| g.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => n,
        _ => cores.clamp(1, DEFAULT_MAX_WORKERS),
    }
}

#[cfg(test)]
mod tests {
    use super::worker_threads;

    #[test]
    fn few_workers_unless_told() {
        assert_eq!(worker_threads(None, 64), 2);
        assert_eq!(worker_threads(None, 1), 1);
        assert_eq!(worker_threads(Some("8"), 64), 8);
        assert_eq!(worker_threads(Some("0"), 64), 2);
        assert_eq!(worker_threads(Some("many"), 1), 1);
    }
}
