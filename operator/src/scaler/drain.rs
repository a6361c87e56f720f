//! The readers' measured drain rate, from their lease ConfigMaps `<source>-lease-<pod>`.
//!
//! Why the readers' own figure: queue depth says how much work there is, not how fast a reader gets
//! through it; a sink that slows down makes each reader slower, and only the rate the readers
//! actually achieve tells how many are needed to clear the backlog within `targetDrainSeconds`.
//!
//! Which leases count: an expired lease belongs to a reader that is gone; a draining reader is
//! leaving and its rate is winding down; a reader with rate 0 is idle, so its rate says nothing about
//! what it could do. The per-replica figure averages the rest; the total (for status) sums every
//! live lease.

use std::collections::BTreeMap;

use sluice_protocol::{Lease, ROLE_LABEL, SOURCE_LABEL};

/// Label value of `ROLE_LABEL` on lease ConfigMaps.
const LEASE_ROLE: &str = "lease";

/// Label selector of a source's lease ConfigMaps.
pub fn lease_selector(source: &str) -> String {
    format!("{SOURCE_LABEL}={source},{ROLE_LABEL}={LEASE_ROLE}")
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DrainRate {
    /// Mean over busy, live, non-draining readers; `None` when there is none.
    pub per_replica: Option<f64>,
    /// Sum over live readers, messages per second.
    pub total: f64,
    /// Live leases read.
    pub live_readers: usize,
}

/// Reads the rate from the lease ConfigMaps' data. `now_ms` is the operator's clock; a lease is
/// live until it expired on it (readers and operator are assumed within a lease of each other).
/// Unreadable leases are skipped: the checkpoint coordinator reports them.
pub fn drain_rate<'a>(
    leases: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    now_ms: i64,
) -> DrainRate {
    let mut rate = DrainRate::default();
    let mut busy = Vec::new();
    for lease in leases.into_iter().filter_map(|data| Lease::from_data(data).ok()) {
        if lease.is_expired(now_ms, 0) {
            continue;
        }
        let per_second = lease.drain_millis_per_second as f64 / 1000.0;
        rate.live_readers += 1;
        rate.total += per_second;
        if !lease.draining && per_second > 0.0 {
            busy.push(per_second);
        }
    }
    if !busy.is_empty() {
        rate.per_replica = Some(busy.iter().sum::<f64>() / busy.len() as f64);
    }
    rate
}

#[cfg(test)]
mod tests {
    use sluice_protocol::Incarnation;

    use super::*;

    fn lease(pod: &str, renewed_at_ms: i64, drain_millis: u64, draining: bool) -> BTreeMap<String, String> {
        let mut lease = Lease::new(pod, Incarnation(1), renewed_at_ms, 15);
        lease.drain_millis_per_second = drain_millis;
        lease.draining = draining;
        lease.to_data().expect("encodable")
    }

    #[test]
    fn averages_busy_live_readers() {
        let now = 100_000;
        let leases = [
            lease("a", now - 1_000, 40_000, false),
            lease("b", now - 2_000, 20_000, false),
            // Idle: live but says nothing about capacity.
            lease("c", now - 1_000, 0, false),
            // Leaving.
            lease("d", now - 1_000, 5_000, true),
            // Expired 15 s after its last renewal: gone.
            lease("e", now - 15_000, 90_000, false),
        ];
        let mut unreadable = BTreeMap::new();
        unreadable.insert("holder".to_owned(), "f".to_owned());
        let rate = drain_rate(leases.iter().chain([&unreadable]), now);
        assert_eq!(rate, DrainRate { per_replica: Some(30.0), total: 65.0, live_readers: 4 });
    }

    #[test]
    fn no_busy_reader_means_no_rate() {
        let rate = drain_rate([&lease("a", 0, 0, false)], 1_000);
        assert_eq!(rate, DrainRate { per_replica: None, total: 0.0, live_readers: 1 });
        assert_eq!(drain_rate([], 0), DrainRate::default());
    }

    #[test]
    fn selector_names_source_and_role() {
        assert_eq!(lease_selector("orders"), "sluice.dev/source=orders,sluice.dev/checkpoint-role=lease");
    }
}
