//! The readers' measured drain rate and message ages, from their lease ConfigMaps
//! `<source>-lease-<pod>`.
//!
//! Why the readers' own figure: queue depth says how much work there is, not how fast a reader gets
//! through it; a sink that slows down makes each reader slower, and only the rate the readers
//! actually achieve tells how many are needed to clear the backlog within `targetDrainSeconds`.
//!
//! Where the rate comes from: every reader writes one report under the key `held`
//! (`sluice_crds::HeldReport`) whatever its guarantee; under exactlyOnce the same ConfigMap is also
//! the checkpoint protocol's lease, whose expiry and `draining` flag say more about liveness, so its
//! figures are preferred there. An at-least-once reader's report is live while it is younger than
//! [`REPORT_STALE_MS`] (it is rewritten at least every 30 s).
//!
//! Which readers count: an expired lease or a stale report belongs to a reader that is gone; a
//! draining reader (its lease's `draining` flag, or the last report a leaving at-least-once reader
//! writes, `draining: true`) is leaving and its rate is winding down, so it counts nowhere here,
//! neither in the rate, the total the latency target sums, nor the ages, from the moment it
//! starts its drain rather than when its report goes stale; it still shows in `status.readers`
//! (marked `draining`) until it is gone. A reader with rate 0 is idle, so its rate says nothing
//! about what it could do. The per-replica figure averages the rest; the total (for status and
//! the latency target) sums every live reader. The ages are the largest any live reader reported.

use std::collections::BTreeMap;

use sluice_crds::{HELD_REPORT_KEY, HeldReport};
use sluice_protocol::{Lease, ROLE_LABEL, SOURCE_LABEL};

/// Age after which an at-least-once reader's report is a reader that is gone: two of its 30 s
/// refreshes and some slack.
pub const REPORT_STALE_MS: i64 = 65_000;

/// Label value of `ROLE_LABEL` on lease ConfigMaps.
const LEASE_ROLE: &str = "lease";

/// The label selector of every reader's lease, of any source.
pub fn all_leases_selector() -> String {
    format!("{ROLE_LABEL}={LEASE_ROLE}")
}

/// Label selector of a source's lease ConfigMaps.
pub fn lease_selector(source: &str) -> String {
    format!("{SOURCE_LABEL}={source},{ROLE_LABEL}={LEASE_ROLE}")
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DrainRate {
    /// Mean over busy, live, non-draining readers; `None` when there is none.
    pub per_replica: Option<f64>,
    /// Sum over live, non-draining readers, messages per second.
    pub total: f64,
    /// Live, non-draining readers read.
    pub live_readers: usize,
    /// The oldest message age at receive any live reader reported for its last interval, seconds;
    /// `None` when none received.
    pub oldest_age_seconds: Option<f64>,
    /// The largest 99th percentile of the delivery wait (SentTimestamp to hand-off) any live reader
    /// reported, seconds; `None` when none handed off.
    pub delivery_wait_p99_seconds: Option<f64>,
}

/// One live reader's figures: drain rate (msg/s) and whether it is leaving.
struct Reader {
    per_second: f64,
    draining: bool,
}

/// The reader a ConfigMap's data describes, if it is live at `now_ms`, with its report if any.
fn reader(data: &BTreeMap<String, String>, now_ms: i64) -> Option<(Reader, Option<HeldReport>)> {
    let report = data.get(HELD_REPORT_KEY).and_then(|r| serde_json::from_str::<HeldReport>(r).ok());
    if let Ok(lease) = Lease::from_data(data) {
        if lease.is_expired(now_ms, 0) {
            return None;
        }
        let reader =
            Reader { per_second: lease.drain_millis_per_second as f64 / 1000.0, draining: lease.draining };
        return Some((reader, report));
    }
    let report = report.filter(|r| now_ms - r.reported_at_ms <= REPORT_STALE_MS)?;
    let reader = Reader {
        per_second: report.reader.drain_millis_per_second as f64 / 1000.0,
        draining: report.reader.draining,
    };
    Some((reader, Some(report)))
}

fn seconds(ms: Option<u64>) -> Option<f64> {
    ms.map(|ms| ms as f64 / 1000.0)
}

/// Reads the rate and ages from the lease ConfigMaps' data. `now_ms` is the operator's clock; a
/// lease is live until it expired on it (readers and operator are assumed within a lease of each
/// other). Unreadable leases are skipped: the checkpoint coordinator reports them.
pub fn drain_rate<'a>(
    leases: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    now_ms: i64,
) -> DrainRate {
    let mut rate = DrainRate::default();
    let mut busy = Vec::new();
    let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let live = leases.into_iter().filter_map(|data| reader(data, now_ms));
    for (reader, report) in live.filter(|(reader, _)| !reader.draining) {
        rate.live_readers += 1;
        rate.total += reader.per_second;
        if reader.per_second > 0.0 {
            busy.push(reader.per_second);
        }
        if let Some(report) = report {
            rate.oldest_age_seconds =
                max(rate.oldest_age_seconds, seconds(report.reader.oldest_age_milliseconds));
            rate.delivery_wait_p99_seconds =
                max(rate.delivery_wait_p99_seconds, seconds(report.reader.delivery_wait_p99_milliseconds));
        }
    }
    if !busy.is_empty() {
        rate.per_replica = Some(busy.iter().sum::<f64>() / busy.len() as f64);
    }
    rate
}

#[cfg(test)]
mod tests {
    use sluice_crds::ReaderHeld;
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
        assert_eq!(
            rate,
            DrainRate { per_replica: Some(30.0), total: 60.0, live_readers: 3, ..DrainRate::default() }
        );
    }

    #[test]
    fn no_busy_reader_means_no_rate() {
        let rate = drain_rate([&lease("a", 0, 0, false)], 1_000);
        assert_eq!(
            rate,
            DrainRate { per_replica: None, total: 0.0, live_readers: 1, ..DrainRate::default() }
        );
        assert_eq!(drain_rate([], 0), DrainRate::default());
    }

    /// An at-least-once reader's ConfigMap: only its report, no protocol keys.
    fn report(
        pod: &str,
        reported_at_ms: i64,
        drain_millis: u64,
        oldest_ms: Option<u64>,
    ) -> BTreeMap<String, String> {
        report_of(pod, reported_at_ms, drain_millis, oldest_ms, false)
    }

    fn report_of(
        pod: &str,
        reported_at_ms: i64,
        drain_millis: u64,
        oldest_ms: Option<u64>,
        draining: bool,
    ) -> BTreeMap<String, String> {
        let report = HeldReport {
            reported_at_ms,
            reader: ReaderHeld {
                pod: pod.to_owned(),
                drain_millis_per_second: drain_millis,
                oldest_age_milliseconds: oldest_ms,
                delivery_wait_p99_milliseconds: oldest_ms.map(|ms| ms / 2),
                draining,
                ..ReaderHeld::default()
            },
        };
        BTreeMap::from([(HELD_REPORT_KEY.to_owned(), serde_json::to_string(&report).expect("json"))])
    }

    #[test]
    fn at_least_once_readers_count_by_their_reports_until_stale() {
        let now = 200_000;
        let maps = [
            report("a", now - 5_000, 12_000, Some(9_000)),
            report("b", now - 29_000, 8_000, None),
            // Gone: its last report is older than two refreshes.
            report("c", now - REPORT_STALE_MS - 1, 50_000, Some(60_000)),
        ];
        let rate = drain_rate(&maps, now);
        assert_eq!(
            rate,
            DrainRate {
                per_replica: Some(10.0),
                total: 20.0,
                live_readers: 2,
                oldest_age_seconds: Some(9.0),
                delivery_wait_p99_seconds: Some(4.5),
            }
        );
    }

    #[test]
    fn a_draining_at_least_once_reader_counts_nowhere_from_its_last_report() {
        let now = 300_000;
        let maps = [
            report("a", now - 5_000, 12_000, Some(9_000)),
            // Its last report, just written: leaving, its old ages must not hold the target up.
            report_of("b", now - 1_000, 0, Some(40_000), true),
            // A draining reader whose report still carried a rate: ignored all the same.
            report_of("c", now - 1_000, 30_000, Some(50_000), true),
        ];
        let rate = drain_rate(&maps, now);
        assert_eq!(
            rate,
            DrainRate {
                per_replica: Some(12.0),
                total: 12.0,
                live_readers: 1,
                oldest_age_seconds: Some(9.0),
                delivery_wait_p99_seconds: Some(4.5),
            }
        );
    }

    #[test]
    fn a_draining_lease_counts_neither_in_the_total_nor_the_ages() {
        let now = 100_000;
        let mut leaving = lease("d", now - 1_000, 5_000, true);
        let old = report_of("d", now - 1_000, 0, Some(70_000), true);
        leaving.extend(old);
        let rate = drain_rate([&lease("a", now - 1_000, 10_000, false), &leaving], now);
        assert_eq!(
            rate,
            DrainRate { per_replica: Some(10.0), total: 10.0, live_readers: 1, ..DrainRate::default() }
        );
    }

    #[test]
    fn selector_names_source_and_role() {
        assert_eq!(lease_selector("orders"), "sluice.dev/source=orders,sluice.dev/checkpoint-role=lease");
    }
}
