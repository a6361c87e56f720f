//! The `targetLatencySeconds` rule: replicas enough to take what arrives and clear the backlog within
//! the target, at the rate one reader reached under full load.
//!
//! Why not "one more while the age is over the target": the age the readers report is the age of what
//! they received in their last interval, so it stays over the target for as long as the backlog
//! takes to clear, and a rule driven by it keeps adding replicas the feed does not need. Sized on
//! the arrival rate, the fleet asks for what the feed needs; the age only adds one more when the
//! fleet is not already on track (the backlog does not shrink and is more than the target's worth
//! at the fleet's drain), which covers an estimate that is off.

use super::flow::Flow;
use super::reason::{Basis, LatencySizing};

/// The share of a reader's measured rate the fleet is planned to use: at full use any blip makes
/// the backlog grow for good, and the measured rate is itself an estimate.
pub const PLANNED_UTILISATION: f64 = 0.9;

/// What the rule reads, beside the target.
pub(super) struct Inputs {
    /// Seconds, the larger of the oldest age and the p99 delivery wait reported (0 when none).
    pub age_seconds: f64,
    pub current: i32,
    pub backlog: i64,
    pub flow: Flow,
    /// The per-replica rate to plan with (`flow::capacity`).
    pub capacity: Option<f64>,
    /// The source-wide rate limit bounds the drain: more replicas would only split it.
    pub limit_binds: bool,
}

/// Replicas `target_seconds` needs, and the basis that names the figures.
pub(super) fn needed(target_seconds: i32, seen: &Inputs) -> (i32, Basis) {
    let current = seen.current.max(0);
    let age_seconds = seen.age_seconds;
    let basis = |sizing| Basis::Latency { age_seconds, target_seconds, sizing };
    if seen.limit_binds {
        // Fewer replicas might not reach the limit, more add nothing: hold.
        return (current, basis(LatencySizing::RateLimited));
    }
    let over = age_seconds > f64::from(target_seconds);
    let one_more = (current.saturating_add(1), basis(LatencySizing::OneMore));
    let Some(per_replica) = seen.capacity.filter(|r| r.is_finite() && *r > 0.0) else {
        // No rate to size on: one at a time while over the target, nothing asked otherwise.
        return if over { one_more } else { (0, basis(LatencySizing::OneMore)) };
    };
    let wanted = seen.flow.arrival + seen.backlog.max(0) as f64 / f64::from(target_seconds.max(1));
    // Float to int `as` saturates: a rate tiny enough to overflow means "as many as allowed".
    let sized = (wanted / (per_replica * PLANNED_UTILISATION)).ceil() as i32;
    let arrival =
        LatencySizing::Arrival { arrival_per_second: seen.flow.arrival, per_replica_per_second: per_replica };
    if !over {
        (sized, basis(arrival))
    } else if sized > current || seen.flow.keeps_target(seen.backlog, target_seconds) {
        // On track while the reported age lags: no more, and no fewer until the age is under it.
        (sized.max(current), basis(arrival))
    } else {
        one_more
    }
}
