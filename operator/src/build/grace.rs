//! How long a reader pod gets to stop.
//!
//! Why it depends on the spec: on SIGTERM a reader stops receiving, lets an open long poll return
//! (up to `waitTimeSeconds`), finishes or releases its in-flight messages, and under exactlyOnce
//! must also see its open epoch committed, which takes up to one checkpoint interval. A fixed
//! grace period would either kill exactly-once readers mid-epoch (their work is redelivered) or
//! hold every rollout for minutes. The reader's own deadline is set a margin below the kubelet's,
//! so the reader exits cleanly before the SIGKILL.

use sluice_crds::{Guarantee, SqsSourceSpec};

/// The reader's default deadline (`--shutdown-deadline-seconds`, default 20: `reader/src/config/cli.rs`).
const READER_DEFAULT_DEADLINE: i64 = 20;
/// Time between the reader's deadline and the kubelet's SIGKILL.
const KILL_MARGIN: i64 = 10;
/// Extra time for an exactly-once reader beyond one checkpoint interval (ack, commit, deletes).
const COMMIT_MARGIN: i64 = 10;
/// Upper bound on either figure: one hour.
const MAX_SECONDS: i64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownPlan {
    /// `--shutdown-deadline-seconds` of the reader.
    pub reader_deadline_seconds: i64,
    /// `terminationGracePeriodSeconds` of the pod.
    pub grace_period_seconds: i64,
}

pub fn shutdown_plan(spec: &SqsSourceSpec) -> ShutdownPlan {
    if let Some(grace) = spec.reader.termination_grace_period_seconds {
        let grace = grace.clamp(1, MAX_SECONDS);
        return ShutdownPlan {
            reader_deadline_seconds: (grace - KILL_MARGIN).max(1),
            grace_period_seconds: grace,
        };
    }
    let poll = i64::from(spec.receive.wait_time_seconds.max(0)) + 5;
    let epoch = match spec.delivery.guarantee {
        Guarantee::ExactlyOnce => {
            spec.delivery.checkpoint_interval_seconds.map_or(0, |s| i64::from(s.max(0)) + COMMIT_MARGIN)
        }
        Guarantee::AtLeastOnce => 0,
    };
    let deadline = READER_DEFAULT_DEADLINE.max(poll).max(epoch).min(MAX_SECONDS);
    ShutdownPlan { reader_deadline_seconds: deadline, grace_period_seconds: deadline + KILL_MARGIN }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn plan(yaml: &str) -> ShutdownPlan {
        shutdown_plan(&fixtures::source(yaml).spec)
    }

    #[test]
    fn at_least_once_uses_the_reader_default() {
        assert_eq!(
            plan(fixtures::BASIC),
            ShutdownPlan { reader_deadline_seconds: 25, grace_period_seconds: 35 }
        );
    }

    #[test]
    fn exactly_once_covers_one_checkpoint_interval() {
        // checkpointIntervalSeconds: 30
        assert_eq!(
            plan(fixtures::EXACTLY_ONCE_SECRET),
            ShutdownPlan { reader_deadline_seconds: 40, grace_period_seconds: 50 }
        );
    }

    #[test]
    fn an_explicit_grace_period_wins_and_the_reader_stops_before_it() {
        assert_eq!(
            plan(fixtures::ASSUME_ROLE),
            ShutdownPlan { reader_deadline_seconds: 80, grace_period_seconds: 90 }
        );
    }

    #[test]
    fn absurd_values_are_clamped() {
        let mut spec = fixtures::source(fixtures::BASIC).spec;
        spec.reader.termination_grace_period_seconds = Some(-5);
        assert_eq!(shutdown_plan(&spec).grace_period_seconds, 1);
        assert_eq!(shutdown_plan(&spec).reader_deadline_seconds, 1);
        spec.reader.termination_grace_period_seconds = None;
        spec.delivery.guarantee = Guarantee::ExactlyOnce;
        spec.delivery.checkpoint_interval_seconds = Some(i32::MAX);
        assert_eq!(shutdown_plan(&spec).reader_deadline_seconds, MAX_SECONDS);
    }
}
