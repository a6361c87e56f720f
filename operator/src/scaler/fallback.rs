//! `spec.scaling.fallback`: what the scaler does while it cannot read its queue.
//!
//! Pure, like `decision`: the loop counts failed reads into a [`Blindness`], asks [`sight`] where
//! that leaves the source, carries out the replica count it names and writes the `Fallback`
//! condition [`condition`] words. A read that fails names no backlog, so nothing here looks at
//! the queue: below the threshold the replicas stay as they are, at it the spec's behavior sets
//! them (see `sluice_crds::FallbackSpec` for why the default never takes readers away).

use k8s_openapi::jiff::Timestamp;
use sluice_crds::{DEFAULT_FALLBACK_REPLICAS, FallbackBehavior, ScalingSpec};

/// The condition type the scaler writes.
pub const FALLBACK: &str = "Fallback";

/// Consecutive failed queue reads, since when, and the last one's error line.
#[derive(Clone, Debug, PartialEq)]
pub struct Blindness {
    pub failures: u32,
    pub since: Timestamp,
    pub last_error: String,
}

impl Blindness {
    /// The first failed read after a good one (or the loop's start); `since` to the second, as
    /// a reader of the status wants it.
    pub fn first(now: Timestamp, error: impl Into<String>) -> Self {
        let since = Timestamp::from_second(now.as_second()).unwrap_or(now);
        Self { failures: 1, since, last_error: error.into() }
    }

    /// One more failed read.
    #[must_use]
    pub fn again(self, error: impl Into<String>) -> Self {
        Self { failures: self.failures.saturating_add(1), last_error: error.into(), ..self }
    }
}

/// Where the source stands with its queue reads, and what that means for its replicas.
#[derive(Clone, Debug, PartialEq)]
pub enum Sight {
    /// The last read succeeded: the decision sizes the readers.
    Seeing,
    /// Fewer failed reads in a row than `failureThreshold`: the replicas are kept.
    Blind { blindness: Blindness, threshold: u32 },
    /// The fallback applies: `replicas` is what `behavior` asks for.
    Fallback { blindness: Blindness, behavior: FallbackBehavior, replicas: i32 },
}

impl Sight {
    /// The replica count to run with `current` running; `None` while the decision sizes them.
    pub fn replicas(&self, current: i32) -> Option<i32> {
        match self {
            Self::Seeing => None,
            Self::Blind { .. } => Some(current),
            Self::Fallback { replicas, .. } => Some(*replicas),
        }
    }

    pub fn applies(&self) -> bool {
        matches!(self, Self::Fallback { .. })
    }
}

/// The count the fallback runs with `current` replicas running: `keepCurrent` keeps them,
/// `fixed` runs `replicas`, `atLeastCurrent` the larger of both; `replicas` (default 1) is first
/// brought within `minReplicas`-`maxReplicas`.
pub fn fallback_replicas(spec: &ScalingSpec, current: i32) -> i32 {
    let min = spec.min_replicas.max(0);
    let max = spec.max_replicas.max(min);
    let given = spec.fallback.replicas.unwrap_or(DEFAULT_FALLBACK_REPLICAS).clamp(min, max);
    let current = current.max(0);
    match spec.fallback.behavior {
        FallbackBehavior::KeepCurrent => current,
        FallbackBehavior::Fixed => given,
        FallbackBehavior::AtLeastCurrent => current.max(given),
    }
}

/// Where `blindness` (none: the last read succeeded) leaves a source running `current` replicas.
pub fn sight(spec: &ScalingSpec, blindness: Option<&Blindness>, current: i32) -> Sight {
    let Some(blindness) = blindness else { return Sight::Seeing };
    let threshold = spec.fallback.failure_threshold.max(1).unsigned_abs();
    if blindness.failures < threshold {
        return Sight::Blind { blindness: blindness.clone(), threshold };
    }
    Sight::Fallback {
        blindness: blindness.clone(),
        behavior: spec.fallback.behavior,
        replicas: fallback_replicas(spec, current),
    }
}

/// The `Fallback` condition before timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The fallback as the spec sets it, in words: "atLeastCurrent 1 replica after 3 failed reads".
pub fn described(spec: &ScalingSpec) -> String {
    let fallback = &spec.fallback;
    let threshold = fallback.failure_threshold.max(1);
    let behavior = fallback.behavior.as_str();
    match fallback.behavior {
        FallbackBehavior::KeepCurrent => format!("{behavior} after {threshold} failed reads"),
        _ => {
            let replicas = fallback.replicas.unwrap_or(DEFAULT_FALLBACK_REPLICAS);
            format!("{behavior} {replicas} after {threshold} failed reads")
        }
    }
}

/// The condition for `sight`: False (QueueReadable, or ScalerBlind below the threshold) or True
/// (FallbackApplied).
pub fn condition(spec: &ScalingSpec, sight: &Sight) -> Verdict {
    match sight {
        Sight::Seeing => Verdict {
            status: "False",
            reason: "QueueReadable",
            message: format!(
                "the autoscaler reads the queue's attributes; spec.scaling.fallback ({}) applies while it cannot",
                described(spec)
            ),
        },
        Sight::Blind { blindness, threshold } => Verdict {
            status: "False",
            reason: "ScalerBlind",
            message: format!(
                "{} of {threshold} queue reads in a row failed since {} ({}): replicas kept; spec.scaling.fallback applies at {threshold}",
                blindness.failures, blindness.since, blindness.last_error
            ),
        },
        Sight::Fallback { blindness, behavior, replicas } => Verdict {
            status: "True",
            reason: "FallbackApplied",
            message: format!(
                "{} queue reads in a row failed since {} ({}): spec.scaling.fallback {} sets the readers to {replicas} until a read succeeds; check the operator's path and permissions to the queue",
                blindness.failures,
                blindness.since,
                blindness.last_error,
                behavior.as_str()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::FallbackSpec;

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("in range")
    }

    fn spec(behavior: FallbackBehavior, replicas: Option<i32>) -> ScalingSpec {
        ScalingSpec {
            min_replicas: 0,
            max_replicas: 8,
            fallback: FallbackSpec { failure_threshold: 3, behavior, replicas },
            ..ScalingSpec::default()
        }
    }

    fn blind(failures: u32) -> Blindness {
        (1..failures)
            .fold(Blindness::first(at(0), "connection refused"), |b, _| b.again("connection refused"))
    }

    #[test]
    fn below_the_threshold_the_replicas_are_kept() {
        let spec = spec(FallbackBehavior::Fixed, Some(5));
        assert_eq!(sight(&spec, None, 4), Sight::Seeing);
        assert_eq!(sight(&spec, None, 4).replicas(4), None);
        for failures in 1..3 {
            let seen = sight(&spec, Some(&blind(failures)), 4);
            assert!(matches!(seen, Sight::Blind { threshold: 3, .. }), "{seen:?}");
            assert_eq!(seen.replicas(4), Some(4));
            assert!(!seen.applies());
        }
        let seen = sight(&spec, Some(&blind(3)), 4);
        assert!(seen.applies());
        assert_eq!(seen.replicas(4), Some(5));
    }

    /// What each behavior runs at the threshold, from a busy source (6), an idle one (0) and one
    /// between: the default never lowers, keepCurrent never changes, fixed sets.
    #[test]
    fn each_behavior_sets_its_count() {
        let cases = [
            (FallbackBehavior::KeepCurrent, None, [(6, 6), (0, 0), (2, 2)]),
            (FallbackBehavior::Fixed, Some(3), [(6, 3), (0, 3), (2, 3)]),
            (FallbackBehavior::AtLeastCurrent, None, [(6, 6), (0, 1), (2, 2)]),
            (FallbackBehavior::AtLeastCurrent, Some(4), [(6, 6), (0, 4), (2, 4)]),
        ];
        for (behavior, replicas, table) in cases {
            let spec = spec(behavior, replicas);
            for (current, expected) in table {
                let seen = sight(&spec, Some(&blind(3)), current);
                assert_eq!(
                    seen.replicas(current),
                    Some(expected),
                    "{behavior:?} {replicas:?} from {current}"
                );
            }
        }
    }

    #[test]
    fn the_default_never_scales_a_busy_source_down_and_wakes_one_at_zero() {
        let spec = ScalingSpec { min_replicas: 0, ..ScalingSpec::default() };
        assert_eq!(spec.fallback.behavior, FallbackBehavior::AtLeastCurrent);
        for failures in 1..20 {
            for current in 0..=10 {
                let run = sight(&spec, Some(&blind(failures)), current).replicas(current).expect("blind");
                assert!(run >= current, "{failures} failures took {current} replicas to {run}");
                if current == 0 && failures >= 3 {
                    assert_eq!(run, 1);
                }
            }
        }
    }

    #[test]
    fn the_fallback_count_stays_within_the_bounds() {
        let mut spec = spec(FallbackBehavior::Fixed, Some(50));
        assert_eq!(fallback_replicas(&spec, 1), 8, "lowered to maxReplicas");
        spec.min_replicas = 2;
        spec.fallback.replicas = Some(0);
        assert_eq!(fallback_replicas(&spec, 5), 2, "raised to minReplicas");
    }

    #[test]
    fn the_condition_names_the_count_and_the_error() {
        let spec = spec(FallbackBehavior::AtLeastCurrent, None);
        let seeing = condition(&spec, &Sight::Seeing);
        assert_eq!((seeing.status, seeing.reason), ("False", "QueueReadable"));
        assert!(seeing.message.contains("atLeastCurrent 1 after 3 failed reads"), "{}", seeing.message);
        let blind_one = condition(&spec, &sight(&spec, Some(&blind(1)), 0));
        assert_eq!((blind_one.status, blind_one.reason), ("False", "ScalerBlind"));
        assert!(blind_one.message.starts_with("1 of 3 queue reads in a row failed"), "{}", blind_one.message);
        let applied = condition(&spec, &sight(&spec, Some(&blind(4)), 0));
        assert_eq!((applied.status, applied.reason), ("True", "FallbackApplied"));
        assert!(applied.message.contains("connection refused"), "{}", applied.message);
        assert!(applied.message.contains("atLeastCurrent sets the readers to 1"), "{}", applied.message);
    }
}
