//! The scaling decision, as a pure function of what the scaler observed.
//!
//! Everything that makes autoscaling hard to trust (activation, step limits, the stabilization window,
//! the idle cooldown, the drain-rate raise) lives here and nowhere else, so it is tested as a table
//! without a cluster or a queue. The I/O loop in `task.rs` only gathers inputs and applies the result.
//!
//! The rules, in order:
//! 1. backlog = visible (+ in-flight if `countInFlight`) (+ delayed if `countDelayed`);
//!    active iff backlog > `activationThreshold` (KEDA's `activationQueueLength`).
//! 2. recommended = ceil(backlog / `targetMessagesPerReplica`), raised to
//!    ceil(backlog / (measured msg/s per replica * `targetDrainSeconds`)) when readers are too slow to
//!    clear the backlog in time, then clamped to [`minReplicas`, `maxReplicas`].
//!    With `targetLatencySeconds` L (`latency.rs`), raised to
//!    ceil((arrival + backlog / L) / (per-replica rate * 0.9)): the arrival rate is the fleet's
//!    summed drain plus the backlog's growth over the last intervals (`flow.rs`), the per-replica
//!    rate is the one the readers reached under full load, and 0.9 the planned utilisation (a
//!    reader's rate is an estimate, and at full use the backlog never recovers from a blip). While
//!    the reported age exceeds L it never falls below the current count, and is one more than that
//!    only when the fleet is not on track (the backlog does not shrink and is more than L's worth
//!    at the fleet's drain), so an age that lags while the backlog clears adds nothing; it scales in only
//!    once the age is under L and fewer replicas carry the arrivals. Under a binding source-wide
//!    rate limit the rule holds the count running.
//! 3. With `minReplicas` 0 and an inactive queue: stay at zero, or go to zero once idle for
//!    `idleCooldownSeconds` (at least one replica is kept until then). At zero, an active reading
//!    wakes the source only as the `activationReadings`-th in a row: SQS's figures are
//!    approximate, and one non-zero reading of an empty queue would start a reader for nothing
//!    and keep it for the cooldown. Two readings cost one poll interval of reaction; a receive
//!    probe would answer sooner but spend a receive of the message it finds (SQS counts it
//!    against `maxReceiveCount`) and needs the reader's credentials in the operator.
//! 4. Up at once, at most `scaleUpMaxStep` more (raising to `minReplicas` is never step-limited);
//!    down to the highest recommendation within `scaleDownStabilizationSeconds`, never below
//!    `minReplicas` nor above `maxReplicas`.

use k8s_openapi::jiff::Timestamp;
use sluice_crds::{QueueFigures, ScalingSpec};

use super::flow::{self, Flow, Sample};
use super::history::History;
use super::latency;
use super::reason::{Basis, Reason};

/// What the scaler observed this interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Summed over the source's queues.
    pub figures: QueueFigures,
    /// The Deployment's `spec.replicas`.
    pub current: i32,
    /// Messages per second one reader deletes, averaged over the readers that report a positive rate;
    /// `None` when none does (no readers yet, or all idle), and then the rate raises nothing.
    pub drain_per_replica: Option<f64>,
    /// Messages per second the live readers reported deleting, summed (0 when none reports).
    pub fleet_drain: f64,
    /// The larger of the oldest message age at receive and the 99th percentile delivery wait that
    /// any live reader reported for its last interval, seconds; `None` when none reported one.
    pub age_seconds: Option<f64>,
    /// The source-wide `rateLimit.messagesPerSecond`, if any: readers split it, so once the fleet
    /// drains at (nearly) that rate, more replicas add no throughput.
    pub rate_limit: Option<f64>,
    pub now: Timestamp,
}

/// Share of the source-wide rate limit at which the limit, not the replica count, bounds the drain.
const LIMIT_BOUND: f64 = 0.9;

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub desired: i32,
    pub reason: Reason,
    /// The backlog the decision was made on.
    pub backlog: i64,
    /// This interval's recommendation, before stabilization and step limit.
    pub recommended: i32,
    /// The estimated arrival rate, messages per second (`flow::estimate`).
    pub arrival_per_second: f64,
    /// To pass to the next decision.
    pub history: History,
}

impl Decision {
    pub fn changes(&self, current: i32) -> bool {
        self.desired != current
    }
}

/// Messages that count toward the backlog, per the spec's `countInFlight` and `countDelayed`.
pub fn backlog(spec: &ScalingSpec, figures: &QueueFigures) -> i64 {
    let mut backlog = figures.visible.max(0);
    if spec.count_in_flight {
        backlog = backlog.saturating_add(figures.in_flight.max(0));
    }
    if spec.count_delayed {
        backlog = backlog.saturating_add(figures.delayed.max(0));
    }
    backlog
}

/// The spec's numbers made safe to compute with (validation should already have refused the others).
struct Bounds {
    min: i32,
    max: i32,
    per_replica: i64,
    threshold: i64,
    step: i32,
}

impl Bounds {
    fn of(spec: &ScalingSpec) -> Self {
        let min = spec.min_replicas.max(0);
        Self {
            min,
            max: spec.max_replicas.max(min),
            per_replica: spec.target_messages_per_replica.max(1),
            threshold: spec.activation_threshold.max(0),
            step: spec.scale_up_max_step.max(1),
        }
    }

    fn clamp(&self, wanted: i32, basis: Basis) -> (i32, Basis) {
        if wanted > self.max {
            (self.max, Basis::MaxReplicas { wanted, over: basis.name() })
        } else if wanted < self.min {
            (self.min, Basis::MinReplicas)
        } else {
            (wanted, basis)
        }
    }
}

fn saturating_i32(value: u64) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// What the latency rule reads beside the observation, derived from the history.
struct Derived {
    flow: Flow,
    capacity: Option<f64>,
    limit_binds: bool,
}

/// Replicas the backlog needs, before bounds, and what sized it.
fn needed(
    spec: &ScalingSpec,
    bounds: &Bounds,
    backlog: i64,
    seen: &Observation,
    derived: &Derived,
) -> (i32, Basis) {
    // The drain-rate raise assumes another replica drains as much again; under a binding
    // source-wide rate limit it would only split the same rate further.
    let drain_per_replica = if derived.limit_binds { None } else { seen.drain_per_replica };
    let backlog_u = u64::try_from(backlog).unwrap_or(0);
    let by_backlog = saturating_i32(backlog_u.div_ceil(bounds.per_replica.unsigned_abs()));
    let mut best = (by_backlog, Basis::Backlog { per_replica: bounds.per_replica });
    let rate = drain_per_replica.filter(|r| r.is_finite() && *r > 0.0);
    let drain_seconds = spec.target_drain_seconds;
    if let Some(rate) = rate
        && drain_seconds > 0
        && backlog > 0
    {
        // Float to int `as` saturates; a rate tiny enough to overflow means "as many as allowed".
        let by_rate = (backlog as f64 / (rate * f64::from(drain_seconds))).ceil() as i32;
        if by_rate > best.0 {
            best = (by_rate, Basis::DrainRate { per_replica_per_second: rate, drain_seconds });
        }
    }
    if let Some(target) = spec.target_latency_seconds.filter(|t| *t > 0) {
        let inputs = latency::Inputs {
            age_seconds: seen.age_seconds.unwrap_or(0.0),
            current: seen.current,
            backlog,
            flow: derived.flow,
            capacity: derived.capacity,
            limit_binds: derived.limit_binds,
        };
        let by_latency = latency::needed(target, &inputs);
        if by_latency.0 > best.0 {
            best = by_latency;
        }
    }
    best
}

/// The arrival estimate and the per-replica capacity from `history` and this interval, and the
/// history that remembers this interval for the next.
fn derive(spec: &ScalingSpec, seen: &Observation, backlog: i64, history: History) -> (Derived, History) {
    let limit_binds = match (seen.rate_limit, seen.drain_per_replica) {
        (Some(limit), Some(rate)) => rate * f64::from(seen.current.max(0)) >= LIMIT_BOUND * limit,
        _ => false,
    };
    let sample = Sample { at: seen.now, backlog, fleet_drain: seen.fleet_drain };
    let flow = flow::estimate(history.samples(), sample);
    let measured = seen.drain_per_replica.filter(|r| r.is_finite() && *r > 0.0 && !limit_binds);
    let age = seen.age_seconds.unwrap_or(0.0);
    let over_target = spec.target_latency_seconds.is_some_and(|target| age > f64::from(target));
    let saturated = flow::saturated(seen.figures.visible, seen.fleet_drain, over_target);
    let capacity = flow::capacity(history.capacity(), measured, saturated);
    let history = history.record_sample(sample).with_capacity(capacity);
    (Derived { flow, capacity, limit_binds }, history)
}

/// Decides the replica count for one interval. Pure: same inputs, same decision.
pub fn decide(spec: &ScalingSpec, seen: &Observation, history: History) -> Decision {
    let bounds = Bounds::of(spec);
    let now = seen.now;
    let current = seen.current.max(0);
    let backlog = backlog(spec, &seen.figures);
    let active = backlog > bounds.threshold;
    let history = if active { history.mark_active(now) } else { history };
    let history = history.count_reading(active);
    let (derived, history) = derive(spec, seen, backlog, history);
    let (wanted, basis) = needed(spec, &bounds, backlog, seen, &derived);
    let arrival_per_second = derived.flow.arrival;
    let (mut recommended, basis) = bounds.clamp(wanted, basis);
    let window = i64::from(spec.scale_down_stabilization_seconds);

    // Zero is governed by activation and the idle cooldown, not by the stabilization window.
    let mut cooling = None;
    if bounds.min == 0 && !active {
        let threshold = bounds.threshold;
        if current == 0 {
            let history = history.record(now, 0, window);
            let reason = Reason::Idle { backlog, threshold };
            return Decision { desired: 0, reason, backlog, recommended: 0, arrival_per_second, history };
        }
        let idle_seconds = history.idle_seconds(now);
        let cooldown_seconds = i64::from(spec.idle_cooldown_seconds.max(0));
        if idle_seconds >= cooldown_seconds {
            let history = history.forget_recommendations();
            let reason = Reason::ScaledToZero { idle_seconds };
            return Decision { desired: 0, reason, backlog, recommended: 0, arrival_per_second, history };
        }
        recommended = recommended.max(1).min(bounds.max);
        cooling = Some(Reason::CoolingDown { idle_seconds, cooldown_seconds });
    }
    let needed = spec.activation_readings.clamp(1, 5).unsigned_abs();
    let readings = history.active_readings();
    if bounds.min == 0 && current == 0 && readings < needed {
        let history = history.record(now, 0, window);
        let reason = Reason::Confirming { backlog, threshold: bounds.threshold, readings, needed };
        return Decision { desired: 0, reason, backlog, recommended: 0, arrival_per_second, history };
    }

    let history = history.record(now, recommended, window);
    let (desired, reason) = if recommended > current {
        let stepped = current.saturating_add(bounds.step);
        let desired = recommended.min(stepped).max(bounds.min);
        let reason = if current == 0 && active {
            Reason::Activated { backlog, threshold: bounds.threshold, desired }
        } else {
            Reason::ScaledUp { backlog, recommended, basis, step_limited: desired < recommended }
        };
        (desired, reason)
    } else if recommended < current {
        let highest = history.highest().unwrap_or(recommended).clamp(bounds.min, bounds.max);
        if highest < current {
            (highest, Reason::ScaledDown { backlog, recommended: highest })
        } else {
            let reason = cooling.unwrap_or(Reason::Stabilizing { recommended, highest_in_window: highest });
            (current, reason)
        }
    } else {
        (current, cooling.unwrap_or(Reason::Steady { backlog, recommended }))
    };
    Decision { desired, reason, backlog, recommended, arrival_per_second, history }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
