//! Why the scaler chose a replica count, in words a user reads in `status.lastScaleReason`, and in the
//! PascalCase reason of the Event it emits.
//!
//! The reason is a value, not a log line, so the tests can assert *why* a decision was taken and the
//! status, the Event and the log all say the same thing.

use std::fmt;

/// How the latency target sized its recommendation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LatencySizing {
    /// ceil((arrival + backlog / target) / (per-replica rate x planned utilisation)).
    Arrival { arrival_per_second: f64, per_replica_per_second: f64 },
    /// The age is over the target and the fleet is not clearing the backlog within it, or no rate
    /// is measured yet: one more than running.
    OneMore,
    /// The source-wide rate limit bounds the drain: the count running is held.
    RateLimited,
}

/// What sized the recommendation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Basis {
    /// `ceil(backlog / targetMessagesPerReplica)`.
    Backlog { per_replica: i64 },
    /// The readers' measured drain rate cannot clear the backlog within `targetDrainSeconds`.
    DrainRate { per_replica_per_second: f64, drain_seconds: i32 },
    /// `targetLatencySeconds`: what arrives plus the backlog within the target, or one more while the
    /// reported age is over it and the fleet is not on track.
    Latency { age_seconds: f64, target_seconds: i32, sizing: LatencySizing },
    /// Held up by `minReplicas`.
    MinReplicas,
    /// Held down by `maxReplicas`: the rule named `over` asked for `wanted`.
    MaxReplicas { wanted: i32, over: &'static str },
}

impl Basis {
    /// The setting or figure behind this basis, as a user finds it in the spec or the status.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Backlog { .. } => "targetMessagesPerReplica",
            Self::DrainRate { .. } => "drain rate",
            Self::Latency { .. } => "targetLatencySeconds",
            Self::MinReplicas => "minReplicas",
            Self::MaxReplicas { .. } => "maxReplicas",
        }
    }
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Backlog { per_replica } => write!(f, "{per_replica} messages per replica"),
            Self::DrainRate { per_replica_per_second, drain_seconds } => write!(
                f,
                "readers drain {per_replica_per_second:.1} msg/s each, too slow to clear it within {drain_seconds}s"
            ),
            Self::Latency { age_seconds, target_seconds, sizing } => {
                write!(
                    f,
                    "targetLatencySeconds {target_seconds}, oldest message waited {age_seconds:.1}s: "
                )?;
                match sizing {
                    LatencySizing::Arrival { arrival_per_second, per_replica_per_second } => write!(
                        f,
                        "{arrival_per_second:.1} msg/s arriving plus the backlog within the target, at {per_replica_per_second:.1} msg/s per replica"
                    ),
                    LatencySizing::OneMore => {
                        f.write_str("one more, as the readers are not clearing the backlog within the target")
                    }
                    LatencySizing::RateLimited => {
                        f.write_str("held, as the source's rateLimit bounds the drain")
                    }
                }
            }
            Self::MinReplicas => f.write_str("minReplicas"),
            Self::MaxReplicas { wanted, over } => write!(f, "maxReplicas; the {over} asked for {wanted}"),
        }
    }
}

/// The outcome of one decision. The first four change the replica count and emit an Event.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// 0 -> n: the backlog rose above `activationThreshold`.
    Activated { backlog: i64, threshold: i64, desired: i32 },
    /// More replicas, at once, at most `scaleUpMaxStep` more.
    ScaledUp { backlog: i64, recommended: i32, basis: Basis, step_limited: bool },
    /// Fewer replicas: the highest recommendation within the stabilization window.
    ScaledDown { backlog: i64, recommended: i32 },
    /// n -> 0 after `idleCooldownSeconds` at or below the activation threshold.
    ScaledToZero { idle_seconds: i64 },
    /// The recommendation equals the current count.
    Steady { backlog: i64, recommended: i32 },
    /// The recommendation is lower, but a higher one is still within `scaleDownStabilizationSeconds`.
    Stabilizing { recommended: i32, highest_in_window: i32 },
    /// Idle with replicas left; zero waits for `idleCooldownSeconds`.
    CoolingDown { idle_seconds: i64, cooldown_seconds: i64 },
    /// At zero and the backlog is not above the activation threshold.
    Idle { backlog: i64, threshold: i64 },
    /// At zero, the backlog is above the activation threshold in `readings` of the
    /// `activationReadings` in a row needed to wake: zero until the next reading confirms it.
    Confirming { backlog: i64, threshold: i64, readings: u32, needed: u32 },
}

impl Reason {
    /// The Event reason for a decision that changed replicas; `None` when nothing changed.
    pub fn event_reason(&self) -> Option<&'static str> {
        match self {
            Self::Activated { .. } => Some("Activated"),
            Self::ScaledUp { .. } => Some("ScaledUp"),
            Self::ScaledDown { .. } => Some("ScaledDown"),
            Self::ScaledToZero { .. } => Some("ScaledToZero"),
            Self::Steady { .. }
            | Self::Stabilizing { .. }
            | Self::CoolingDown { .. }
            | Self::Idle { .. }
            | Self::Confirming { .. } => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Activated { backlog, threshold, desired } => {
                write!(f, "backlog {backlog} rose above activationThreshold {threshold}; starting {desired}")
            }
            Self::ScaledUp { backlog, recommended, basis, step_limited } => {
                write!(f, "backlog {backlog} needs {recommended} replicas ({basis})")?;
                if *step_limited {
                    f.write_str("; limited by scaleUpMaxStep")?;
                }
                Ok(())
            }
            Self::ScaledDown { backlog, recommended } => write!(
                f,
                "backlog {backlog}: {recommended} replicas, the highest recommendation within the stabilization window"
            ),
            Self::ScaledToZero { idle_seconds } => {
                write!(f, "idle for {idle_seconds}s, at least idleCooldownSeconds")
            }
            Self::Steady { backlog, recommended } => {
                write!(f, "backlog {backlog} needs {recommended} replicas, as many as running")
            }
            Self::Stabilizing { recommended, highest_in_window } => write!(
                f,
                "recommendation {recommended} is lower, but {highest_in_window} is still within the stabilization window"
            ),
            Self::CoolingDown { idle_seconds, cooldown_seconds } => {
                write!(f, "idle for {idle_seconds}s of the {cooldown_seconds}s idleCooldownSeconds")
            }
            Self::Idle { backlog, threshold } => {
                write!(f, "backlog {backlog} is not above activationThreshold {threshold}")
            }
            Self::Confirming { backlog, threshold, readings, needed } => write!(
                f,
                "backlog {backlog} above activationThreshold {threshold} in {readings} of the {needed} readings in a row activationReadings asks before waking"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_have_event_reasons() {
        let changes = [
            (Reason::Activated { backlog: 5, threshold: 0, desired: 1 }, "Activated"),
            (
                Reason::ScaledUp {
                    backlog: 500,
                    recommended: 5,
                    basis: Basis::Backlog { per_replica: 100 },
                    step_limited: false,
                },
                "ScaledUp",
            ),
            (Reason::ScaledDown { backlog: 0, recommended: 1 }, "ScaledDown"),
            (Reason::ScaledToZero { idle_seconds: 60 }, "ScaledToZero"),
        ];
        for (reason, expected) in changes {
            assert_eq!(reason.event_reason(), Some(expected), "{reason}");
        }
        let holds = [
            Reason::Steady { backlog: 100, recommended: 1 },
            Reason::Stabilizing { recommended: 1, highest_in_window: 3 },
            Reason::CoolingDown { idle_seconds: 5, cooldown_seconds: 60 },
            Reason::Idle { backlog: 0, threshold: 0 },
            Reason::Confirming { backlog: 3, threshold: 0, readings: 1, needed: 2 },
        ];
        for reason in holds {
            assert_eq!(reason.event_reason(), None, "{reason}");
        }
    }

    #[test]
    fn messages_name_the_setting_that_decided() {
        let up = Reason::ScaledUp {
            backlog: 20_000,
            recommended: 200,
            basis: Basis::Backlog { per_replica: 100 },
            step_limited: true,
        };
        assert_eq!(
            up.to_string(),
            "backlog 20000 needs 200 replicas (100 messages per replica); limited by scaleUpMaxStep"
        );
        let drain = Basis::DrainRate { per_replica_per_second: 2.5, drain_seconds: 60 };
        assert_eq!(drain.to_string(), "readers drain 2.5 msg/s each, too slow to clear it within 60s");
        assert_eq!(
            Reason::ScaledToZero { idle_seconds: 61 }.to_string(),
            "idle for 61s, at least idleCooldownSeconds"
        );
    }
}
