//! WARN lines for faults that repeat, rate-limited per key (a sink and an error kind), with counts.
//!
//! Why: a sink that refuses everything fails every message, thousands of times a minute; a line
//! per failure drowns the log, and no line at all (debug only) hides the fault. The first failure
//! of a kind is logged at once; then at most one line per [`WINDOW`] per key, saying how many
//! failures it stands for and the latest reason.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per key per window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Per key: when the last line was written and the failures since.
#[derive(Default)]
pub struct RateLimited {
    keys: HashMap<(String, &'static str), (Instant, u64)>,
}

impl RateLimited {
    /// One more failure for `key` at `now`: `Some(count)` when a line is due now, standing for
    /// `count` failures (this one included) since the last line.
    pub fn note(&mut self, sink: &str, kind: &'static str, now: Instant) -> Option<u64> {
        match self.keys.get_mut(&(sink.to_owned(), kind)) {
            None => {
                self.keys.insert((sink.to_owned(), kind), (now, 0));
                Some(1)
            }
            Some((last, count)) => {
                *count += 1;
                if now.duration_since(*last) < WINDOW {
                    return None;
                }
                let due = *count;
                (*last, *count) = (now, 0);
                Some(due)
            }
        }
    }
}

/// The rate limit of one reader's WARN lines, shared by every stage that words its own.
#[derive(Default)]
pub struct Warnings {
    limited: Mutex<RateLimited>,
}

impl Warnings {
    /// Another occurrence of `kind` at `key` (a sink, a queue, a stage): `Some(count)` when a WARN
    /// line is due now, standing for `count` occurrences since the last one.
    pub fn due(&self, key: &str, kind: &'static str) -> Option<u64> {
        self.limited.lock().unwrap_or_else(|e| e.into_inner()).note(key, kind, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_logged_then_one_line_per_window_with_the_count() {
        let mut limited = RateLimited::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s * 100);
        assert_eq!(limited.note("web", "failed", at(0)), Some(1));
        let quiet: Vec<Option<u64>> = (1..100).map(|i| limited.note("web", "failed", at(i))).collect();
        assert!(quiet.iter().all(Option::is_none), "nothing within the window");
        assert_eq!(limited.note("web", "failed", at(100)), Some(100), "99 quiet ones and this one");
        assert_eq!(limited.note("web", "rejected", at(100)), Some(1), "another kind has its own window");
        assert_eq!(limited.note("s3", "failed", at(101)), Some(1), "another sink too");
        assert_eq!(limited.note("web", "failed", at(101)), None);
    }
}
