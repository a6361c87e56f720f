//! Whether S3 answers the payload fetches: readiness for the payload stage, as `sink::health` is
//! for the sinks.
//!
//! Why: while S3 fails every fetch, messages are held, not delivered, and nothing else would
//! show it where people look. The reader turns not ready once fetches have failed, with no
//! answer from S3 in between, for `--unready-after-seconds` (the same rule and clock as a
//! sink's: `sink::health::Health`), and ready again on the next answer. An answer is any reply
//! that says S3 is reachable: the object, or a permanent refusal (missing, denied, too large).

use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use crate::sink::health::{Health, unready_after};

/// The one entry the payload stage keeps in its `Health`.
const S3: &str = "s3";

static HEALTH: LazyLock<Mutex<Health>> = LazyLock::new(Mutex::default);

fn health() -> MutexGuard<'static, Health> {
    HEALTH.lock().unwrap_or_else(|e| e.into_inner())
}

/// S3 answered a fetch (with the object or a permanent refusal).
pub fn answered() {
    health().delivered(S3, sluice_protocol::now_ms());
}

/// A fetch failed transiently (after its own few retries) for `reason`.
pub fn failed(reason: &str) {
    health().failed(S3, Instant::now(), reason);
}

/// Fetches have failed, with no answer since, for the reader's `--unready-after-seconds`.
pub fn stalled() -> bool {
    health().stalled(Instant::now(), unready_after())
}
