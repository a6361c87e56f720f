//! Wall-clock time in milliseconds since the Unix epoch: the unit of every time in the checkpoint
//! and lease ConfigMaps.
//!
//! Why here, and one function: the operator and the readers stamp and compare these times
//! (renewals, expiry, epoch openings), and a reader also compares them with SQS's (lag,
//! `Retry-After` dates), so every process must read the clock the same way: a clock before 1970
//! reads as 0, one past the year 292 million as `i64::MAX`. The state machines themselves never
//! call it: their callers pass the time in.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_this_code_was_written() {
        // 2026-01-01T00:00:00Z.
        assert!(now_ms() > 1_767_225_600_000);
    }
}
