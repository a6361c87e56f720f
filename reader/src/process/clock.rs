//! Wall-clock time in milliseconds since the Unix epoch.
//!
//! Why one function: leases, lag, `Retry-After` dates and object names all compare wall-clock
//! milliseconds with other processes' (the operator's, SQS's), so they must be read the same way;
//! a clock before 1970 reads as 0 and one past the year 292 million as `i64::MAX`.

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
