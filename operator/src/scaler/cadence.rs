//! How long a source's loop waits before its next interval.
//!
//! Why two paces: an operator serving hundreds of sources finds most of them idle (at zero
//! replicas, nothing in the queue), and polling each at `pollIntervalSeconds` would cost 12
//! GetQueueAttributes a minute per source (with the Deployment read and lease list of every
//! interval) to learn nothing. An idle source is read every `idlePollIntervalSeconds` instead; the
//! moment a reading shows work, or the source runs readers, it is back at `pollIntervalSeconds`, so
//! scaling a busy source and confirming a wake-up (`activationReadings`) are not slowed. What idling
//! costs is the first sight of a message at an idle queue: up to `idlePollIntervalSeconds`.

use std::time::Duration;

use sluice_crds::ScalingSpec;

use super::task::Tick;

/// The wait after an interval that ended with `outcome` (`None`: the interval failed);
/// `missing`: how many intervals in a row, this one included, found no reader Deployment.
pub fn next_interval(spec: &ScalingSpec, outcome: Option<&Tick>, missing: u32) -> Duration {
    let busy = seconds(spec.poll_interval_seconds);
    if matches!(outcome, Some(Tick::NoDeployment)) {
        // The reconciler usually creates it within a second, at the source's starting replicas;
        // when a thousand sources are applied at once it takes longer, and a thousand loops asking
        // every second would crowd the API server the reconciler is creating them through. So 1,
        // 2, 4 s and on, up to the poll interval.
        return Duration::from_secs(1 << missing.saturating_sub(1).min(6)).min(busy);
    }
    let idle = match outcome {
        Some(Tick::Decided { current, decision }) => {
            *current == 0 && decision.desired == 0 && decision.backlog <= spec.activation_threshold
        }
        // Held at zero until the spec changes, and a spec change starts no interval early
        // anyway: the loop reads the watched source at each interval.
        Some(Tick::Suspended) => true,
        Some(Tick::NoDeployment) | None => false,
    };
    if idle { busy.max(seconds(spec.idle_poll_interval_seconds)) } else { busy }
}

fn seconds(value: i32) -> Duration {
    Duration::from_secs(value.max(1).unsigned_abs().into())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::scaler::decision::Decision;
    use crate::scaler::history::History;
    use crate::scaler::reason::Reason;

    fn decided(current: i32, desired: i32, backlog: i64) -> Tick {
        let decision = Decision {
            desired,
            reason: Reason::Steady { backlog, recommended: desired },
            backlog,
            recommended: desired,
            arrival_per_second: 0.0,
            history: History::starting_at(Timestamp::UNIX_EPOCH, current),
        };
        Tick::Decided { current, decision }
    }

    #[test]
    fn an_idle_source_polls_at_the_idle_interval_and_a_busy_one_at_the_poll_interval() {
        let spec = ScalingSpec { min_replicas: 0, ..ScalingSpec::default() };
        let s = Duration::from_secs;
        assert_eq!(next_interval(&spec, Some(&decided(0, 0, 0)), 0), s(30));
        assert_eq!(next_interval(&spec, Some(&Tick::Suspended), 0), s(30));
        // A reading with work (a wake-up waiting for its confirming reading) or running readers.
        assert_eq!(next_interval(&spec, Some(&decided(0, 0, 3)), 0), s(5));
        assert_eq!(next_interval(&spec, Some(&decided(0, 1, 3)), 0), s(5));
        assert_eq!(next_interval(&spec, Some(&decided(1, 0, 0)), 0), s(5));
        // A failed interval: the usual pace; a Deployment not there yet: looked for again soon.
        assert_eq!(next_interval(&spec, None, 0), s(5));
        assert_eq!(next_interval(&spec, Some(&Tick::NoDeployment), 1), s(1));
    }

    #[test]
    fn a_deployment_not_there_yet_is_looked_for_again_ever_later_up_to_the_poll_interval() {
        let spec = ScalingSpec::default();
        let waits: Vec<u64> =
            (1..=5).map(|n| next_interval(&spec, Some(&Tick::NoDeployment), n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
    }

    #[test]
    fn a_backlog_at_or_under_the_activation_threshold_is_idle() {
        let spec = ScalingSpec { min_replicas: 0, activation_threshold: 10, ..ScalingSpec::default() };
        assert_eq!(next_interval(&spec, Some(&decided(0, 0, 10)), 0), Duration::from_secs(30));
        assert_eq!(next_interval(&spec, Some(&decided(0, 0, 11)), 0), Duration::from_secs(5));
    }

    #[test]
    fn the_idle_interval_is_never_faster_than_the_poll_interval() {
        let spec = ScalingSpec {
            min_replicas: 0,
            poll_interval_seconds: 60,
            idle_poll_interval_seconds: 30,
            ..ScalingSpec::default()
        };
        assert_eq!(next_interval(&spec, Some(&decided(0, 0, 0)), 0), Duration::from_secs(60));
    }
}
