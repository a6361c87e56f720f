//! Whether deliveries are getting through: the last success and the failures since, across sinks.
//!
//! Why: a sink that refuses everything must turn the reader not ready, so that the fault shows
//! where people look (`/readyz`, the Deployment's ready count), not only in counters. "Stalled"
//! means a delivery failed and none has succeeded for the configured time since the later of the
//! last success and the first failure after it: an idle reader (no work) is never stalled.

use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Health {
    /// The first failure since the last success, if any.
    failing_since: Option<Instant>,
}

impl Health {
    pub fn delivered(&mut self) {
        self.failing_since = None;
    }

    pub fn failed(&mut self, now: Instant) {
        self.failing_since.get_or_insert(now);
    }

    /// No success for `after` while deliveries fail.
    pub fn stalled(&self, now: Instant, after: Duration) -> bool {
        self.failing_since.is_some_and(|since| now.duration_since(since) >= after)
    }
}

static HEALTH: LazyLock<Mutex<Health>> = LazyLock::new(Mutex::default);

fn health() -> std::sync::MutexGuard<'static, Health> {
    HEALTH.lock().unwrap_or_else(|e| e.into_inner())
}

/// A sink acknowledged a delivery.
pub fn delivered() {
    health().delivered();
}

/// A delivery failed or was refused.
pub fn failed() {
    health().failed(Instant::now());
}

/// No delivery has succeeded for `after` while deliveries fail.
pub fn stalled(after: Duration) -> bool {
    health().stalled(Instant::now(), after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalled_only_when_failing_without_a_success_for_the_whole_time() {
        let mut health = Health::default();
        let t0 = Instant::now();
        let after = Duration::from_secs(60);
        assert!(!health.stalled(t0 + Duration::from_secs(600), after), "idle is not stalled");
        health.failed(t0);
        health.failed(t0 + Duration::from_secs(30));
        assert!(!health.stalled(t0 + Duration::from_secs(59), after));
        assert!(health.stalled(t0 + Duration::from_secs(60), after), "counted from the first failure");
        health.delivered();
        assert!(!health.stalled(t0 + Duration::from_secs(120), after), "a success clears it");
    }
}
