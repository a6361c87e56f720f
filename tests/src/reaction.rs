//! The reaction-time benchmark's arithmetic: from when a burst was sent and the reader Deployment's
//! `spec.replicas` as it was watched, how long until the fleet grew, against the target of one poll
//! interval plus 2 s (KEDA's defaults allow up to 30 s of polling plus a 15 s HPA sync).
//!
//! Pure, so `sluice-bench-scale` only sends the burst, watches the Deployment and prints this; it
//! is the benchmark's alone (the operator reacts, it does not measure its reaction).

use std::fmt;
use std::time::Duration;

/// Slack allowed beyond one poll interval: the API round trips and the decision itself.
pub const SLACK: Duration = Duration::from_secs(2);

/// One observation of `spec.replicas`, at a time measured from the same clock as the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaSample {
    pub at: Duration,
    pub replicas: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reaction {
    /// From the burst being sent to the first sample above the replicas at that moment; `None` if
    /// the fleet never grew within the samples.
    pub reaction: Option<Duration>,
    /// From the burst to the highest count seen.
    pub to_peak: Option<Duration>,
    pub peak_replicas: i32,
    pub target: Duration,
}

impl Reaction {
    /// `burst_at` and every sample's `at` are offsets on one clock; samples may be in any order.
    pub fn measure(burst_at: Duration, samples: &[ReplicaSample], poll_interval: Duration) -> Self {
        let mut samples: Vec<ReplicaSample> = samples.to_vec();
        samples.sort_by_key(|s| s.at);
        let before = samples.iter().rev().find(|s| s.at <= burst_at).map_or(0, |s| s.replicas);
        let after = || samples.iter().filter(move |s| s.at > burst_at);
        let raised = after().find(|s| s.replicas > before).map(|s| s.at - burst_at);
        let peak = after().max_by_key(|s| (s.replicas, std::cmp::Reverse(s.at)));
        Reaction {
            reaction: raised,
            to_peak: peak.filter(|p| p.replicas > before).map(|p| p.at - burst_at),
            peak_replicas: peak.map_or(before, |p| p.replicas.max(before)),
            target: poll_interval + SLACK,
        }
    }

    pub fn within_target(&self) -> bool {
        self.reaction.is_some_and(|r| r <= self.target)
    }
}

impl fmt::Display for Reaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reaction {
            Some(reaction) => write!(
                f,
                "burst to raised replicas: {:.2}s (target {:.0}s: {}); to peak of {}: {:.2}s",
                reaction.as_secs_f64(),
                self.target.as_secs_f64(),
                if self.within_target() { "met" } else { "MISSED" },
                self.peak_replicas,
                self.to_peak.unwrap_or(reaction).as_secs_f64(),
            ),
            None => write!(
                f,
                "replicas never rose after the burst (target {:.0}s: MISSED)",
                self.target.as_secs_f64()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: u64, replicas: i32) -> ReplicaSample {
        ReplicaSample { at: Duration::from_millis(millis), replicas }
    }

    #[test]
    fn reaction_counts_from_the_burst_to_the_first_raise() {
        let samples = [at(0, 0), at(900, 0), at(4_200, 5), at(9_300, 10), at(9_900, 10), at(60_000, 0)];
        let reaction = Reaction::measure(Duration::from_millis(1_000), &samples, Duration::from_secs(5));
        assert_eq!(reaction.reaction, Some(Duration::from_millis(3_200)));
        assert_eq!(reaction.to_peak, Some(Duration::from_millis(8_300)));
        assert_eq!(reaction.peak_replicas, 10);
        assert!(reaction.within_target());
        assert_eq!(
            reaction.to_string(),
            "burst to raised replicas: 3.20s (target 7s: met); to peak of 10: 8.30s"
        );
    }

    #[test]
    fn a_late_or_absent_raise_misses_the_target() {
        let late = Reaction::measure(Duration::ZERO, &[at(0, 1), at(7_001, 2)], Duration::from_secs(5));
        assert!(!late.within_target(), "{late}");
        let never = Reaction::measure(Duration::ZERO, &[at(0, 3), at(9_000, 3)], Duration::from_secs(5));
        assert_eq!((never.reaction, never.peak_replicas), (None, 3));
        assert_eq!(never.to_string(), "replicas never rose after the burst (target 7s: MISSED)");
    }

    #[test]
    fn samples_may_come_unordered_and_start_above_zero() {
        let samples = [at(6_000, 4), at(0, 2), at(3_000, 3)];
        let reaction = Reaction::measure(Duration::from_millis(500), &samples, Duration::from_secs(1));
        assert_eq!(reaction.reaction, Some(Duration::from_millis(2_500)));
        assert_eq!(reaction.target, Duration::from_secs(3));
        assert!(reaction.within_target());
    }
}
