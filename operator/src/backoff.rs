//! Retry delays for objects whose reconcile failed for a transient reason.
//!
//! Why per object: `error_policy` has no memory, and a flat retry either hammers a struggling API
//! server or leaves a briefly unlucky object waiting. Counting consecutive failures per object
//! (reset on success) doubles the delay from 5 s up to 5 minutes for that object alone.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const FIRST: Duration = Duration::from_secs(5);
const MAX: Duration = Duration::from_secs(300);

/// Delay before retry number `failures` (1 = first failure).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

/// Consecutive failures per object key (`namespace/name`).
#[derive(Default, Debug)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Records one more failure and returns the delay before the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = map.entry(key.to_owned()).or_default();
        *count = count.saturating_add(1);
        delay(*count)
    }

    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let secs: Vec<u64> = (1..=8).map(|n| delay(n).as_secs()).collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(0), FIRST);
        assert_eq!(delay(u32::MAX), MAX);
    }

    #[test]
    fn success_resets_one_object_only() {
        let f = Failures::default();
        assert_eq!(f.failed("a/x").as_secs(), 5);
        assert_eq!(f.failed("a/x").as_secs(), 10);
        assert_eq!(f.failed("a/y").as_secs(), 5);
        f.succeeded("a/x");
        assert_eq!(f.failed("a/x").as_secs(), 5);
        assert_eq!(f.failed("a/y").as_secs(), 10);
    }
}
