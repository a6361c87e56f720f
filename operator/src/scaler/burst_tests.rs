//! The burst scenario, 20,000 messages from an idle source, played against `decide` with a
//! simple model of the queue and the readers, second by second. It pins the shape the end-to-end
//! test on the local control plane must show: 0 to max at the second poll after the burst (the
//! first reading is confirmed by the next, `activationReadings`), max held while the backlog
//! drains, zero only after the idle cooldown, and no flapping in between.

use k8s_openapi::jiff::Timestamp;
use sluice_crds::{QueueFigures, ScalingSpec};

use super::decision::{Observation, decide};
use super::history::History;

/// What the model needs besides the spec.
struct World {
    /// Messages a ready reader deletes per second.
    per_reader: i64,
    /// Seconds from the Deployment growing to the new readers receiving.
    startup: i64,
    /// Seconds before the first poll at which the burst lands.
    burst_before_poll: i64,
}

#[derive(Debug, Default)]
struct Trace {
    /// (second, desired) for each change.
    changes: Vec<(i64, i32)>,
    drained_at: Option<i64>,
    deleted: i64,
}

fn play(spec: &ScalingSpec, world: &World, burst: i64, seconds: i64) -> Trace {
    let poll = i64::from(spec.poll_interval_seconds);
    let start = Timestamp::from_second(1_800_000_000).expect("in range");
    let mut visible = 0;
    let mut replicas = 0;
    // Readers that can receive, and when each pending one becomes ready.
    let mut ready = 0;
    let mut starting: Vec<i64> = Vec::new();
    let mut history = History::starting_at(start, 0);
    let mut trace = Trace::default();
    let burst_at = poll - world.burst_before_poll;
    for second in 0..seconds {
        if second == burst_at {
            visible += burst;
        }
        ready += starting.iter().filter(|&&t| t == second).count() as i32;
        starting.retain(|&t| t > second);
        let taken = visible.min(i64::from(ready) * world.per_reader);
        visible -= taken;
        trace.deleted += taken;
        if trace.drained_at.is_none() && second > burst_at && visible == 0 {
            trace.drained_at = Some(second);
        }
        if second % poll == 0 {
            // Readers deleting at full speed keep about a second's worth in flight.
            let in_flight = if visible > 0 { taken } else { 0 };
            let figures = QueueFigures { visible, in_flight, delayed: 0, observed_at: None };
            let now = start + k8s_openapi::jiff::SignedDuration::from_secs(second);
            let seen = Observation {
                figures,
                current: replicas,
                drain_per_replica: None,
                fleet_drain: 0.0,
                age_seconds: None,
                rate_limit: None,
                now,
            };
            let decision = decide(spec, &seen, history);
            history = decision.history;
            if decision.desired != replicas {
                trace.changes.push((second, decision.desired));
                if decision.desired > replicas {
                    starting.extend((replicas..decision.desired).map(|_| second + world.startup));
                } else {
                    // Leaving readers stop receiving at once (they drain what they hold).
                    let leaving = replicas - decision.desired;
                    let from_starting = (leaving as usize).min(starting.len());
                    starting.truncate(starting.len() - from_starting);
                    ready -= leaving - from_starting as i32;
                }
                replicas = decision.desired;
            }
        }
    }
    trace
}

#[test]
fn a_20k_burst_goes_zero_to_max_and_back_once() {
    let spec = ScalingSpec { min_replicas: 0, max_replicas: 10, ..ScalingSpec::default() };
    let world = World { per_reader: 40, startup: 3, burst_before_poll: 1 };
    let trace = play(&spec, &world, 20_000, 400);

    // Burst at 4 s, seen at 5 s, confirmed at 10 s: straight to max (200 needed, step 10).
    assert_eq!(trace.changes[0], (10, 10), "{trace:?}");
    // 10 readers at 40 msg/s from 13 s: 20,000 messages gone 50 s later.
    let drained = trace.drained_at.expect("drained");
    assert_eq!(drained, 62, "{trace:?}");
    assert_eq!(trace.deleted, 20_000);
    // Held at max while draining, then down only after the stabilization window and the cooldown.
    let (second, desired) = trace.changes[1];
    assert!(
        second >= drained,
        "scaled down to {desired} at {second}s before the backlog drained at {drained}s"
    );
    let (zero_at, zero) = *trace.changes.last().expect("changes");
    assert_eq!(zero, 0, "{trace:?}");
    assert!(zero_at >= drained + i64::from(spec.idle_cooldown_seconds) - 5, "{trace:?}");
    assert!(zero_at <= drained + i64::from(spec.idle_cooldown_seconds) + 5, "{trace:?}");
    // Monotone: up once, then only down.
    let mut previous = i32::MAX;
    for &(_, desired) in &trace.changes[1..] {
        assert!(desired < previous, "flapped: {trace:?}");
        previous = desired;
    }
}

/// From zero, at most one poll interval without confirmation and one more with the default
/// second reading; never more.
#[test]
fn confirmation_adds_at_most_one_poll_interval_to_the_reaction() {
    for readings in [1, 2] {
        let spec = ScalingSpec {
            min_replicas: 0,
            max_replicas: 10,
            activation_readings: readings,
            ..ScalingSpec::default()
        };
        let poll = i64::from(spec.poll_interval_seconds);
        for burst_before_poll in 1..=poll {
            let world = World { per_reader: 40, startup: 3, burst_before_poll };
            let trace = play(&spec, &world, 20_000, 30);
            let burst_at = poll - burst_before_poll;
            let (raised_at, _) = trace.changes[0];
            let bound = poll * i64::from(readings);
            assert!(
                raised_at - burst_at <= bound,
                "activationReadings {readings}: burst at {burst_at}s, raised at {raised_at}s"
            );
        }
    }
}
