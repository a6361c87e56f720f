//! This reader's sink health, reported to the operator in its own lease ConfigMap
//! `<source>-lease-<pod>` under the data key [`KEY`], which the operator turns into the source's
//! `SinksHealthy` condition and an event on each transition.
//!
//! Why the lease ConfigMap: it is the one object the reader policy (deploy/policy, rule
//! `own-lease-only`) lets a reader write, it is owned by the source (gone with it), and the
//! operator already lists a source's leases by label. Under exactlyOnce the lease's own renewals
//! carry the report (`lease::lease_object`); otherwise [`Reporter`] writes a ConfigMap holding only
//! these keys (no protocol keys: the coordinator ignores it).
//!
//! Beside it, under the key `held`, the rest of the reader's report: what it holds, its drain
//! rate, the oldest age it received and how long its messages waited, for the source's
//! `status.readers` and the autoscaler. Both come from the one `settle::held_report::ReaderReport`
//! the reader builds at start. This writer is what lets an at-least-once source
//! scale on its drain rate as an exactly-once one does.
//!
//! Why rate-limited: a failing sink changes its counts with every message. A write is made when
//! the set of stalled or failing sinks changes, what the reader holds or the oldest age it saw
//! halves or doubles, its bound changes, or its drain rate moves by a quarter either way from the
//! rate last written (`held_report::Shape`: the autoscaler sizes the fleet on the summed rate, and
//! after a scale event each reader's rate moves by a fraction), at most every [`MIN_GAP`], and
//! otherwise every [`REFRESH`] so that the operator can tell a live report from a dead reader's
//! ([`KEY`] carries the time of writing). The API write budget per reader: 2 writes a minute when
//! nothing moves, 12 at worst (a change at every gap), plus the one last report of a drain.
//!
//! The value, JSON: `{"reportedAtMs": 1700000000000, "sinks": {"<sink>": {"lastSuccessMs": ...,
//! "failuresSince": 3, "lastError": "...", "stalled": true, "circuit": "open"}}, "payloadFetches":
//! {"lastSuccessMs": ..., "failuresSince": 1, "lastError": "...", "stalled": true}}` (`circuit`:
//! `closed`, `open` or `half_open`; an open circuit is also `stalled`; `payloadFetches`, the
//! fetches of payloads from S3, only once the reader fetched one, and `stalled` while messages
//! are held for S3: a fetch outage holds messages as a sink outage does).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde::Serialize;
use sluice_protocol::{lease_configmap_name, now_ms};
use tokio_util::sync::CancellationToken;

use super::lease::{ClusterConfig, lease_metadata};
use crate::process::health::{ApiCall, FetchReport, SinkReport};
use crate::settle::held_report::{self, ReaderReport};

/// The data key of the report.
pub const KEY: &str = "sinkHealth";
/// Least time between two writes.
pub const MIN_GAP: Duration = Duration::from_secs(5);
/// Longest time between two writes.
pub const REFRESH: Duration = Duration::from_secs(30);
const TICK: Duration = Duration::from_secs(1);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    reported_at_ms: i64,
    sinks: &'a BTreeMap<String, SinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_fetches: Option<&'a FetchReport>,
}

/// The data entry for `sinks` and the payload `fetches`, written at `now_ms`.
pub fn entry(
    sinks: &BTreeMap<String, SinkReport>,
    fetches: Option<&FetchReport>,
    now_ms: i64,
) -> (String, String) {
    let report = Report { reported_at_ms: now_ms, sinks, payload_fetches: fetches };
    (KEY.to_owned(), serde_json::to_string(&report).unwrap_or_default())
}

/// The data entry of `report` now.
pub fn entry_of(report: &ReaderReport, now_ms: i64) -> (String, String) {
    entry(&report.sinks(), report.fetches().as_ref(), now_ms)
}

/// Per sink (the payload fetches under the name `payloadFetches`, after the sinks): its name,
/// whether it fails, whether it is stalled; and the shape of what the reader holds
/// (`ReaderReport::shape`).
type Shape = (Vec<(String, bool, bool)>, Option<held_report::Shape>);

/// What makes a report worth writing before [`REFRESH`]: which sinks (and whether the payload
/// fetches) fail and which are stalled, and what the reader holds (`held_report::Shape`).
fn shape(
    sinks: &BTreeMap<String, SinkReport>,
    fetches: Option<&FetchReport>,
    report: &ReaderReport,
) -> Shape {
    let sinks = sinks.iter().map(|(name, r)| (name.clone(), r.failures_since > 0, r.stalled));
    let fetches = fetches.map(|f| ("payloadFetches".to_owned(), f.failures_since > 0, f.stalled));
    (sinks.chain(fetches).collect(), report.shape())
}

/// Whether a write is due: never before `MIN_GAP`, at `REFRESH`, and in between when the shape
/// changed. `None` (never written) is due at once.
pub fn due(last: Option<&(Instant, Shape)>, now: Instant, shape: &Shape) -> bool {
    let Some((at, written)) = last else { return true };
    let since = now.duration_since(*at);
    since >= REFRESH || (since >= MIN_GAP && moved(written, shape))
}

fn moved(written: &Shape, now: &Shape) -> bool {
    let held = match (&written.1, &now.1) {
        (Some(written), Some(now)) => now.moved_from(written),
        (written, now) => written != now,
    };
    written.0 != now.0 || held
}

/// The WARN line of a report the API did not take: an outage (no answer, 5xx, timeout) says that
/// delivery goes on; a refusal (403, 422) points at the permissions that allow the write.
fn cannot_report(name: &str, error: &str) -> String {
    let refused = ["403", "422", "Forbidden", "Invalid"].iter().any(|code| error.contains(code));
    if refused {
        format!(
            "cannot report sink health in ConfigMap {name}: {error}; the source's SinksHealthy condition will go stale; check the reader's RoleBinding <source>-sluice-reader (ClusterRole sluice-reader) and the reader-own-lease.sluice.dev policy"
        )
    } else {
        format!(
            "cannot report sink health in ConfigMap {name}: the Kubernetes API did not answer ({error}); delivery goes on without it, the report is retried every {} s and the source's status goes stale until the API is back",
            MIN_GAP.as_secs()
        )
    }
}

/// Writes the report of an at-least-once reader (no lease of the checkpoint protocol).
pub struct Reporter {
    pub config_maps: Api<ConfigMap>,
    pub config: ClusterConfig,
}

impl Reporter {
    /// Reports until `stop`, then writes one last report marking the reader draining (with drain
    /// rate 0) so that the autoscaler stops counting it at once rather than when its report goes
    /// stale; write failures are warned about once per failing spell.
    pub async fn run(self, stop: CancellationToken) {
        let mut last: Option<(Instant, Shape)> = None;
        let mut failing = false;
        loop {
            let report = &self.config.report;
            let (sinks, fetches) = (report.sinks(), report.fetches());
            let now = Instant::now();
            let shape = shape(&sinks, fetches.as_ref(), report);
            // A write the API did not take is tried again after the least gap, changed or not.
            let retry = failing && last.as_ref().is_some_and(|(at, _)| now.duration_since(*at) >= MIN_GAP);
            if retry || due(last.as_ref(), now, &shape) {
                let now_ms = now_ms();
                let held = report.held_entry(&self.config.pod, now_ms);
                match self.write(entry(&sinks, fetches.as_ref(), now_ms), held).await {
                    Ok(()) => {
                        if failing {
                            tracing::info!("sink health reported to the operator again");
                        }
                        failing = false;
                        report.api_answered(ApiCall::Report);
                    }
                    Err(error) => {
                        let error = super::api_line::api_line(&error);
                        report.api_failed(ApiCall::Report, &error);
                        if !failing {
                            failing = true;
                            tracing::warn!("{}", cannot_report(&self.name(), &error));
                        }
                    }
                }
                // A failed write waits the same gap: the API is not hammered.
                last = Some((now, shape));
            }
            tokio::select! {
                () = stop.cancelled() => return self.leave().await,
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// The last report, whatever the gap since the one before.
    async fn leave(&self) {
        let report = &self.config.report;
        report.set_draining();
        let now_ms = now_ms();
        let held = report.held_entry(&self.config.pod, now_ms);
        match self.write(entry_of(report, now_ms), held).await {
            Ok(()) => tracing::info!("reported draining to the operator"),
            Err(error) => tracing::warn!(
                "cannot report draining in ConfigMap {}: {error}; the autoscaler counts this reader until its report goes stale",
                self.name()
            ),
        }
    }

    fn name(&self) -> String {
        lease_configmap_name(&self.config.source, &self.config.pod)
    }

    /// Creates the ConfigMap, or replaces it at the version read.
    async fn write(
        &self,
        health: (String, String),
        held: Option<(String, String)>,
    ) -> Result<(), kube::Error> {
        let name = self.name();
        let current = self.config_maps.get_opt(&name).await?;
        let version = current.as_ref().and_then(|cm| cm.resource_version());
        let object = ConfigMap {
            metadata: lease_metadata(&self.config, version.clone()),
            data: Some(BTreeMap::from_iter(std::iter::once(health).chain(held))),
            ..ConfigMap::default()
        };
        match version {
            Some(_) => self.config_maps.replace(&name, &PostParams::default(), &object).await?,
            None => self.config_maps.create(&PostParams::default(), &object).await?,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(failing: bool, held: u64, drain_per_second: u64) -> Shape {
        let held = held_report::Shape { held, bound: 40, drain_millis: drain_per_second * 1000, age: 0 };
        (vec![("web".to_owned(), failing, false)], Some(held))
    }

    #[test]
    fn writes_at_once_then_on_change_no_sooner_than_the_gap_and_at_the_refresh() {
        let t0 = Instant::now();
        let healthy = shape(false, 3, 100);
        assert!(due(None, t0, &healthy), "the first report at once");
        let written = (t0, healthy.clone());
        let last = Some(&written);
        assert!(!due(last, t0 + Duration::from_secs(4), &shape(true, 3, 100)), "not within the gap");
        assert!(due(last, t0 + MIN_GAP, &shape(true, 3, 100)), "a change after the gap");
        assert!(!due(last, t0 + Duration::from_secs(29), &healthy), "no change: quiet");
        assert!(due(last, t0 + REFRESH, &healthy), "the refresh");
        assert!(due(last, t0 + MIN_GAP, &shape(false, 5, 100)), "held grew fourfold");
        assert!(due(last, t0 + MIN_GAP, &shape(false, 3, 200)), "the drain rate doubled");
    }

    #[test]
    fn a_quarter_move_of_the_drain_rate_writes_after_the_gap_and_jitter_does_not() {
        let t0 = Instant::now();
        let written = (t0, shape(false, 3, 100));
        let last = Some(&written);
        let gap = t0 + MIN_GAP;
        assert!(!due(last, t0 + Duration::from_secs(4), &shape(false, 3, 130)), "not within the gap");
        assert!(due(last, gap, &shape(false, 3, 130)), "30% up");
        assert!(due(last, gap, &shape(false, 3, 78)), "a fifth down, a quarter up the other way");
        for jitter in [90, 96, 104, 110, 118] {
            let jittered = shape(false, 3, jitter);
            assert!(!due(last, t0 + Duration::from_secs(29), &jittered), "{jitter} msg/s is jitter");
        }
    }

    #[test]
    fn an_outage_is_told_apart_from_a_refusal() {
        let outage = cannot_report("s-lease-p", "ServiceError: client error (Connect)");
        assert!(outage.contains("did not answer") && outage.contains("delivery goes on"), "{outage}");
        let refused = cannot_report(
            "s-lease-p",
            "configmaps \"s-lease-p\" is forbidden: User \"u\" cannot update (HTTP 403 Forbidden)",
        );
        assert!(refused.contains("check the reader's RoleBinding"), "{refused}");
    }

    #[test]
    fn the_report_names_each_sink_in_camel_case() {
        let sinks = BTreeMap::from([(
            "web".to_owned(),
            SinkReport {
                last_success_ms: None,
                failures_since: 2,
                last_error: Some("HTTP 503".into()),
                stalled: true,
                circuit: "open",
            },
        )]);
        let (key, value) = entry(&sinks, None, 7);
        assert_eq!(key, "sinkHealth");
        assert_eq!(
            value,
            r#"{"reportedAtMs":7,"sinks":{"web":{"lastSuccessMs":null,"failuresSince":2,"lastError":"HTTP 503","stalled":true,"circuit":"open"}}}"#
        );
        let fetches = FetchReport {
            last_success_ms: Some(5),
            failures_since: 1,
            last_error: Some("GetObject: connection refused".into()),
            stalled: true,
        };
        let (_, value) = entry(&BTreeMap::new(), Some(&fetches), 7);
        assert_eq!(
            value,
            r#"{"reportedAtMs":7,"sinks":{},"payloadFetches":{"lastSuccessMs":5,"failuresSince":1,"lastError":"GetObject: connection refused","stalled":true}}"#
        );
    }
}
