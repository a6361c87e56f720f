//! `status.readers` and `status.held`: what each reader holds, from the reports the readers write
//! beside their sink health in their lease ConfigMaps (key `held`, `sluice_crds::HeldReport`).
//!
//! Why read here: this task already lists every source's leases on its own clock; a second
//! lister would double the API calls for the same objects. The figures are written with a server-side
//! apply under a field manager of their own, so no other status writer resets them.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sluice_crds::{HELD_REPORT_KEY, HeldReport, HeldTotals, ReaderHeld, SqsSource};

use super::verdict::STALE_MS;

/// Field manager of `status.readers` and `status.held`.
pub const FIELD_MANAGER: &str = "sluice-held-report";

/// The readers' fresh reports, ordered by pod, at most `max_readers` (a rollout may briefly run
/// more readers than `maxReplicas`: the ones listed are those holding most). Unreadable reports and
/// those older than [`STALE_MS`] (a reader that is gone) are skipped.
pub fn readers<'a>(
    leases: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    now_ms: i64,
    max_readers: usize,
) -> Vec<ReaderHeld> {
    let mut fresh: Vec<ReaderHeld> = leases
        .into_iter()
        .filter_map(|data| serde_json::from_str::<HeldReport>(data.get(HELD_REPORT_KEY)?).ok())
        .filter(|r| now_ms - r.reported_at_ms <= STALE_MS)
        .map(|r| r.reader)
        .collect();
    fresh.sort_by(|a, b| b.held_messages.cmp(&a.held_messages).then_with(|| a.pod.cmp(&b.pod)));
    fresh.truncate(max_readers);
    fresh.sort_by(|a, b| a.pod.cmp(&b.pod));
    fresh
}

/// The sums over `readers`; `None` when there is none.
pub fn totals(readers: &[ReaderHeld]) -> Option<HeldTotals> {
    (!readers.is_empty()).then(|| HeldTotals {
        messages: readers.iter().map(|r| r.held_messages).sum(),
        bytes: readers.iter().map(|r| r.held_bytes).sum(),
        max_messages_per_reader: readers.iter().map(|r| r.held_messages).max().unwrap_or(0),
        aws_requests_per_thousand_messages: cost(readers),
    })
}

/// The readers' requests per 1,000 messages, weighted by drain rate (a reader that drains more
/// pays more of the bill); a plain mean when none reports a drain rate.
fn cost(readers: &[ReaderHeld]) -> Option<u64> {
    let costed: Vec<(u64, u64)> = readers
        .iter()
        .filter_map(|r| Some((r.aws_requests_per_thousand_messages?, r.drain_millis_per_second)))
        .collect();
    let weight: u64 = costed.iter().map(|(_, d)| d).sum();
    if costed.is_empty() {
        None
    } else if weight == 0 {
        Some(costed.iter().map(|(c, _)| c).sum::<u64>() / costed.len() as u64)
    } else {
        let weighted: u128 = costed.iter().map(|(c, d)| u128::from(*c) * u128::from(*d)).sum();
        u64::try_from(weighted / u128::from(weight)).ok()
    }
}

/// Whether the source's status already shows `readers`.
pub fn shown(source: &SqsSource, readers: &[ReaderHeld]) -> bool {
    source.status.as_ref().is_some_and(|s| s.readers == readers && s.held == totals(readers))
}

/// The apply body: `readers` (empty when none reported) and their totals (null when none, which
/// removes them).
pub fn apply_body(readers: &[ReaderHeld]) -> Value {
    json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "SqsSource",
        "status": { "readers": readers, "held": totals(readers) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(pod: &str, at_ms: i64, held: u64) -> BTreeMap<String, String> {
        let report = HeldReport {
            reported_at_ms: at_ms,
            reader: ReaderHeld {
                pod: pod.into(),
                held_messages: held,
                bound_messages: 40,
                ..ReaderHeld::default()
            },
        };
        BTreeMap::from([(HELD_REPORT_KEY.to_owned(), serde_json::to_string(&report).unwrap())])
    }

    #[test]
    fn fresh_reports_by_pod_at_most_max_readers_holding_most() {
        let now = 1_000_000;
        let leases = [
            lease("c", now - 1_000, 5),
            lease("a", now - 2_000, 30),
            lease("gone", now - STALE_MS - 1, 99),
            lease("b", now, 20),
            BTreeMap::from([("sinkHealth".to_owned(), "{}".to_owned())]),
        ];
        let listed = readers(&leases, now, 2);
        let pods: Vec<_> = listed.iter().map(|r| r.pod.as_str()).collect();
        assert_eq!(pods, ["a", "b"]);
        let expected =
            HeldTotals { messages: 50, bytes: 0, max_messages_per_reader: 30, ..HeldTotals::default() };
        assert_eq!(totals(&listed), Some(expected));
        assert_eq!(totals(&[]), None);
        assert_eq!(apply_body(&[])["status"], json!({ "readers": [], "held": null }));
    }

    #[test]
    fn the_source_cost_is_weighted_by_drain_rate() {
        let reader = |cost: Option<u64>, drain: u64| ReaderHeld {
            aws_requests_per_thousand_messages: cost,
            drain_millis_per_second: drain,
            ..ReaderHeld::default()
        };
        // 300 msg/s at 0.2 and 100 msg/s at 0.6: 0.3 per message for the source.
        assert_eq!(cost(&[reader(Some(200), 300_000), reader(Some(600), 100_000)]), Some(300));
        // Idle readers (no drain rate) and one that delivered nothing in its window.
        assert_eq!(cost(&[reader(Some(200), 0), reader(Some(400), 0), reader(None, 0)]), Some(300));
        assert_eq!(cost(&[reader(None, 5_000)]), None);
    }
}
