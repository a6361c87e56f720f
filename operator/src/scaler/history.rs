//! What a scaling decision has to remember from earlier ones: recent recommendations (scale down uses the
//! highest within `scaleDownStabilizationSeconds`, as the HorizontalPodAutoscaler does, so a queue that
//! empties between bursts does not make the fleet flap) and when the backlog was last above the
//! activation threshold (scale to zero waits `idleCooldownSeconds` after it).
//!
//! It is a plain value handed in and returned by `decide`, so the decision stays a pure function.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    recommendations: Vec<(Timestamp, i32)>,
    last_active: Option<Timestamp>,
}

impl History {
    /// A scaler that starts now, finding `current` replicas, treats them as recommended now and the
    /// queue as active now: without this, an operator restart would scale down at once instead of after
    /// the stabilization window, and an idle source to zero at once instead of after the cooldown.
    pub fn starting_at(now: Timestamp, current: i32) -> Self {
        Self { recommendations: vec![(now, current)], last_active: Some(now) }
    }

    /// When the backlog was last above the activation threshold; `None` means never, i.e. idle forever.
    pub fn last_active(&self) -> Option<Timestamp> {
        self.last_active
    }

    /// Seconds idle at `now`; `i64::MAX` when never active.
    pub fn idle_seconds(&self, now: Timestamp) -> i64 {
        self.last_active.map_or(i64::MAX, |t| now.duration_since(t).as_secs().max(0))
    }

    pub(super) fn mark_active(mut self, now: Timestamp) -> Self {
        self.last_active = Some(now);
        self
    }

    /// Adds `recommended` at `now` and forgets those older than `window_seconds`.
    pub(super) fn record(mut self, now: Timestamp, recommended: i32, window_seconds: i64) -> Self {
        let window = SignedDuration::from_secs(window_seconds.max(0));
        self.recommendations.retain(|(at, _)| now.duration_since(*at) < window);
        self.recommendations.push((now, recommended));
        self
    }

    /// After a scale to zero the window starts afresh: the next activation should not be held by
    /// recommendations from before the idle period.
    pub(super) fn forget_recommendations(mut self) -> Self {
        self.recommendations.clear();
        self
    }

    /// The highest recommendation kept, if any.
    pub fn highest(&self) -> Option<i32> {
        self.recommendations.iter().map(|(_, r)| *r).max()
    }

    /// Recommendations kept, oldest first.
    pub fn recommendations(&self) -> &[(Timestamp, i32)] {
        &self.recommendations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("in range")
    }

    #[test]
    fn window_keeps_only_recent_recommendations() {
        let history = History::default().record(at(0), 9, 60).record(at(30), 4, 60).record(at(60), 2, 60);
        assert_eq!(history.recommendations(), &[(at(30), 4), (at(60), 2)]);
        assert_eq!(history.highest(), Some(4));
    }

    #[test]
    fn zero_window_keeps_only_the_latest() {
        let history = History::default().record(at(0), 9, 0).record(at(5), 2, 0);
        assert_eq!(history.recommendations(), &[(at(5), 2)]);
    }

    #[test]
    fn idle_time_counts_from_last_activity() {
        assert_eq!(History::default().idle_seconds(at(0)), i64::MAX);
        let history = History::starting_at(at(10), 2);
        assert_eq!(history.highest(), Some(2));
        assert_eq!(history.idle_seconds(at(70)), 60);
        assert_eq!(history.mark_active(at(70)).idle_seconds(at(70)), 0);
    }
}
