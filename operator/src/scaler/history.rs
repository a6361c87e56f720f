//! What a scaling decision has to remember from earlier ones: recent recommendations (scale down uses the
//! highest within `scaleDownStabilizationSeconds`, as the HorizontalPodAutoscaler does, so a queue that
//! empties between bursts does not make the fleet flap) and when the backlog was last above the
//! activation threshold (scale to zero waits `idleCooldownSeconds` after it). For a latency target, also
//! the backlog and the fleet's drain of the last intervals (the arrival rate is estimated from how the
//! backlog changed between them) and the per-replica rate the readers reached under full load.
//!
//! And how many readings in a row were above the threshold, so that a source at zero wakes only on
//! a reading the next one confirms (`activationReadings`).
//!
//! It is a plain value handed in and returned by `decide`, so the decision stays a pure function.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::flow::{self, Sample};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    recommendations: Vec<(Timestamp, i32)>,
    last_active: Option<Timestamp>,
    /// Within `flow::WINDOW_SECONDS`, oldest first.
    samples: Vec<Sample>,
    capacity: Option<f64>,
    /// Readings in a row above the activation threshold, this one included; 0 after one at or
    /// below it.
    active_readings: u32,
}

impl History {
    /// A scaler that starts now, finding `current` replicas, treats them as recommended now and the
    /// queue as active now: without this, an operator restart would scale down at once instead of after
    /// the stabilization window, and an idle source to zero at once instead of after the cooldown.
    pub fn starting_at(now: Timestamp, current: i32) -> Self {
        Self { recommendations: vec![(now, current)], last_active: Some(now), ..Self::default() }
    }

    /// What a loop starts from when it first sees its Deployment: [`Self::starting_at`] if the
    /// scaler has sized it before (`sized`: an operator restart finds readers it chose), else
    /// nothing at all. A Deployment the scaler never sized holds the API server's default of one
    /// replica, which nobody asked for: at `minReplicas: 0` with an empty queue it goes to zero at
    /// the first interval instead of running a reader for `idleCooldownSeconds`, so a thousand new
    /// idle sources do not start a thousand readers for a minute.
    pub fn on_first_sight(sized: bool, now: Timestamp, current: i32) -> Self {
        if sized { Self::starting_at(now, current) } else { Self::default() }
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

    /// Counts this reading: one more in a row if `active`, else the count starts over.
    pub(super) fn count_reading(mut self, active: bool) -> Self {
        self.active_readings = if active { self.active_readings.saturating_add(1) } else { 0 };
        self
    }

    /// Readings in a row above the activation threshold, the latest included.
    pub fn active_readings(&self) -> u32 {
        self.active_readings
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

    /// Adds this interval's sample and forgets those older than the arrival window.
    pub(super) fn record_sample(mut self, sample: Sample) -> Self {
        let window = SignedDuration::from_secs(flow::WINDOW_SECONDS);
        self.samples.retain(|s| sample.at.duration_since(s.at) < window);
        self.samples.push(sample);
        self
    }

    /// Earlier intervals' samples within the arrival window, oldest first.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub(super) fn with_capacity(mut self, capacity: Option<f64>) -> Self {
        self.capacity = capacity;
        self
    }

    /// The per-replica rate to plan with (see `flow::capacity`); `None` until a reader reported one.
    pub fn capacity(&self) -> Option<f64> {
        self.capacity
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
    fn samples_older_than_the_arrival_window_are_forgotten() {
        let sample = |second, backlog| Sample { at: at(second), backlog, fleet_drain: 10.0 };
        let history = History::default().record_sample(sample(0, 5)).record_sample(sample(10, 6));
        let history = history.record_sample(sample(flow::WINDOW_SECONDS, 7));
        assert_eq!(history.samples(), &[sample(10, 6), sample(flow::WINDOW_SECONDS, 7)]);
    }

    #[test]
    fn idle_time_counts_from_last_activity() {
        assert_eq!(History::default().idle_seconds(at(0)), i64::MAX);
        let history = History::starting_at(at(10), 2);
        assert_eq!(history.highest(), Some(2));
        assert_eq!(history.idle_seconds(at(70)), 60);
        assert_eq!(history.mark_active(at(70)).idle_seconds(at(70)), 0);
    }

    #[test]
    fn a_deployment_never_sized_starts_with_no_history() {
        assert_eq!(History::on_first_sight(true, at(10), 2), History::starting_at(at(10), 2));
        assert_eq!(History::on_first_sight(false, at(10), 1).idle_seconds(at(10)), i64::MAX);
        assert_eq!(History::on_first_sight(false, at(10), 1).highest(), None);
    }
}
