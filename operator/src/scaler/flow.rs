//! The rate messages arrive at, which no queue attribute reports: what the readers deleted (their
//! reported drain rates, summed) plus what the backlog gained between intervals. And the rate one
//! reader can drain, which its report states only while it has more work than it can take.
//!
//! Why the arrival rate: sized on the backlog alone, a latency target keeps asking for more while the
//! backlog is still clearing and the age the readers report still lags; sized on arrivals plus the
//! backlog, the fleet asks for what the feed needs once the backlog is gone.
//!
//! Why a window: SQS figures are approximate, and a reader's rate covers its last 10 s and is
//! rewritten only when it halves or doubles, or every 30 s; right after a scale-in the survivors
//! take more each, and the summed drain reads low until they report again. Comparing the backlog
//! across the intervals of twice that refresh, and averaging the drain over the same intervals,
//! keeps one stale stretch from halving the estimate.

use k8s_openapi::jiff::Timestamp;

/// How far back the arrival estimate looks, seconds.
pub const WINDOW_SECONDS: i64 = 60;

/// One interval's backlog and the fleet's summed drain rate, as the scaler saw them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub at: Timestamp,
    pub backlog: i64,
    /// Messages per second the live readers reported deleting, summed.
    pub fleet_drain: f64,
}

/// What the window says about the flow through the queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flow {
    /// Messages per second arriving, never below 0.
    pub arrival: f64,
    /// Messages per second the backlog shrank (negative: grew); `None` without an earlier sample
    /// at least a second old, and then `arrival` is the drain alone (a backlog assumed steady).
    pub net: Option<f64>,
    /// The fleet's drain, averaged over the window's intervals.
    pub drain: f64,
}

impl Flow {
    /// Whether the fleet is on track for `target_seconds`: the backlog shrinks, or is small enough
    /// that the readers get through it within the target at the rate they drain. How fast it must
    /// shrink is the sizing's backlog term; judged here, a net rate that trails the queue (readers
    /// just started report nothing yet) would add a replica every interval after a scale-up.
    pub fn keeps_target(&self, backlog: i64, target_seconds: i32) -> bool {
        let Some(net) = self.net else { return false };
        net > 0.0 || backlog.max(0) as f64 <= self.drain * f64::from(target_seconds.max(1))
    }
}

/// The flow from `earlier` samples (oldest first, within [`WINDOW_SECONDS`]) and `now`'s.
pub fn estimate(earlier: &[Sample], now: Sample) -> Flow {
    let base = earlier.iter().find(|s| now.at.duration_since(s.at).as_secs_f64() >= 1.0);
    let Some(base) = base else {
        let drain = now.fleet_drain.max(0.0);
        return Flow { arrival: drain, net: None, drain };
    };
    // The base's drain covers the time before the window; the later ones cover the window.
    let after: Vec<f64> = earlier
        .iter()
        .filter(|s| s.at > base.at)
        .map(|s| s.fleet_drain)
        .chain([now.fleet_drain])
        .map(|d| d.max(0.0))
        .collect();
    let drain = after.iter().sum::<f64>() / after.len() as f64;
    let seconds = now.at.duration_since(base.at).as_secs_f64();
    let growth = (now.backlog.saturating_sub(base.backlog)) as f64 / seconds;
    Flow { arrival: (drain + growth).max(0.0), net: Some(-growth), drain }
}

/// The per-replica rate to plan with. A reader's report is its rate over its recent busy time, which
/// is what it can do only while it has more than it can take; with the fleet `saturated` (messages
/// wait unreceived) the measured rate replaces the one kept, otherwise only a higher one does, so a
/// fleet with idle moments does not read as slow and ask for more of itself.
pub fn capacity(kept: Option<f64>, measured: Option<f64>, saturated: bool) -> Option<f64> {
    match (kept, measured) {
        (_, Some(rate)) if saturated => Some(rate),
        (Some(kept), Some(rate)) => Some(kept.max(rate)),
        (kept, rate) => kept.or(rate),
    }
}

/// Whether the readers are all taking as much as they can: messages waited longer than the
/// target (`over_target`) and more still wait unreceived than the fleet deletes in a second. Both:
/// the age alone trails the queue after a backlog cleared, and the summed drain alone reads low
/// after a scale-in (readers re-report late), when a few waiting messages would pass for a backlog.
pub fn saturated(visible: i64, fleet_drain: f64, over_target: bool) -> bool {
    over_target && fleet_drain > 0.0 && visible.max(0) as f64 > fleet_drain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("in range")
    }

    fn sample(second: i64, backlog: i64, fleet_drain: f64) -> Sample {
        Sample { at: at(second), backlog, fleet_drain }
    }

    #[test]
    fn arrival_is_the_drain_plus_the_backlog_growth() {
        // One reader at 10 msg/s while the backlog grows 15 msg/s: 25 msg/s arrive.
        let flow = estimate(&[sample(0, 100, 10.0), sample(5, 175, 10.0)], sample(10, 250, 10.0));
        assert_eq!(flow, Flow { arrival: 25.0, net: Some(-15.0), drain: 10.0 });
        // Seven at 10 each clearing 45 msg/s: still 25.
        let flow = estimate(&[sample(0, 500, 70.0)], sample(10, 50, 70.0));
        assert_eq!(flow, Flow { arrival: 25.0, net: Some(45.0), drain: 70.0 });
        // Readers not reporting yet (drain 0) while the backlog falls: never below zero.
        assert_eq!(estimate(&[sample(0, 500, 0.0)], sample(5, 400, 0.0)).arrival, 0.0);
    }

    #[test]
    fn without_an_earlier_sample_the_backlog_is_taken_as_steady() {
        assert_eq!(estimate(&[], sample(0, 300, 12.0)), Flow { arrival: 12.0, net: None, drain: 12.0 });
        // Less than a second apart says nothing about growth.
        let flow = estimate(&[Sample { at: at(0), backlog: 0, fleet_drain: 5.0 }], sample(0, 300, 12.0));
        assert_eq!(flow.net, None);
    }

    #[test]
    fn the_target_is_kept_when_the_backlog_shrinks_or_holds_within_it() {
        let flow = |net, drain| Flow { arrival: 25.0, net, drain };
        assert!(flow(Some(45.0), 70.0).keeps_target(375, 10));
        assert!(flow(Some(5.0), 10.0).keeps_target(375, 10), "shrinking, if slowly");
        assert!(flow(Some(-1.0), 30.0).keeps_target(20, 10), "a blip within what the drain clears");
        assert!(!flow(Some(-15.0), 10.0).keeps_target(375, 10), "growing past the target's worth");
        assert!(!flow(Some(0.0), 10.0).keeps_target(375, 10), "stuck past the target's worth");
        assert!(!flow(None, 70.0).keeps_target(0, 10), "not measured");
    }

    #[test]
    fn capacity_falls_only_when_measured_under_full_load() {
        assert_eq!(capacity(None, Some(9.0), false), Some(9.0));
        assert_eq!(capacity(Some(9.8), Some(4.0), false), Some(9.8));
        assert_eq!(capacity(Some(9.8), Some(6.0), true), Some(6.0));
        assert_eq!(capacity(Some(6.0), Some(9.0), false), Some(9.0));
        assert_eq!(capacity(Some(9.8), None, true), Some(9.8));
        assert_eq!(capacity(None, None, false), None);
        assert!(saturated(300, 10.0, true));
        assert!(!saturated(300, 10.0, false), "the age is under the target");
        assert!(!saturated(8, 25.0, true));
        assert!(!saturated(300, 0.0, true));
    }
}
