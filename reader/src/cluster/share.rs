//! This replica's share of the source-wide rate limit: `spec.rateLimit` is for the whole
//! source, so each of `replicas` readers applies `1/replicas` of it, and follows the count the
//! operator's autoscaler publishes as data key `replicas` of the checkpoint ConfigMap
//! `<source>-checkpoint` (field manager `sluice-scaler`).
//!
//! Why the `replicas` key is read by itself rather than through `Checkpoint::from_data`: under
//! at-least-once the checkpoint ConfigMap holds only what the scaler applies, and `from_data`
//! requires the coordinator's keys (`openEpoch`, `committedEpoch`, `openedAtMs`), so it would
//! refuse exactly the ConfigMaps this reads.
//!
//! Why polling and not a watch: one small GET every [`POLL`] is cheap, has no watch to
//! re-establish after the API server drops it, and the scaler itself only decides every
//! `pollIntervalSeconds` (at least 1 s), so a watch would not make the share follow sooner in any
//! way that matters.
//!
//! Why the published count and not the pods that are running: the count is the autoscaler's
//! decision, the same for every reader, so the shares add up to the limit without readers having to
//! agree on who is alive. The scaler publishes a raised count before it adds readers and a lowered
//! one after it removed them, so during a change the readers together stay at or under the limit.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sluice_protocol::checkpoint_configmap_name;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::settings::RateSettings;
use crate::intake::limiter::{Limiter, publish};
use crate::process::metrics::Metrics;

/// How often the checkpoint ConfigMap is read.
pub const POLL: Duration = Duration::from_secs(1);
/// A GET that takes longer than this counts as failed (the last share stays).
const GET_TIMEOUT: Duration = Duration::from_secs(5);
/// The data key the scaler writes (`sluice_protocol::Checkpoint::replicas`).
const REPLICAS_KEY: &str = "replicas";

/// One replica's share of `total` when the autoscaler asks for `replicas` readers.
///
/// `None` or 0 (nothing published, or scaled to zero) gives the full limit. Each rate is divided
/// rounding up, and is at least 1, so the shares never add up to less than the total. The burst is
/// kept in seconds: the limiter sizes each bucket as `burst_seconds` of the rate, so the burst is
/// divided along with the rate; a message larger than its bucket still passes (the limiter takes
/// it in bucket-sized pieces), so no minimum bucket size is needed.
pub fn share(total: RateSettings, replicas: Option<u32>) -> RateSettings {
    let n = match replicas {
        Some(n) if n > 1 => n,
        _ => return total,
    };
    RateSettings {
        messages_per_second: total.messages_per_second.map(|m| m.div_ceil(n).max(1)),
        bytes_per_second: total.bytes_per_second.map(|b| b.div_ceil(u64::from(n)).max(1)),
        burst_seconds: total.burst_seconds,
    }
}

/// Whether `rate` limits anything at all.
pub fn is_limited(rate: &RateSettings) -> bool {
    rate.messages_per_second.is_some() || rate.bytes_per_second.is_some()
}

/// The `replicas` key of a checkpoint ConfigMap's data: `Ok(None)` when it is not there.
pub fn replicas_of(config_map: &ConfigMap) -> Result<Option<u32>, String> {
    let Some(value) = config_map.data.as_ref().and_then(|d| d.get(REPLICAS_KEY)) else {
        return Ok(None);
    };
    value.trim().parse().map(Some).map_err(|_| format!("data key {REPLICAS_KEY} is {value:?}, not a count"))
}

/// Polls `<source>-checkpoint` in `namespace` every [`POLL`] and applies `share(total, replicas)` to
/// `limiter` whenever it changes, logging the change at info and setting the rate gauges. A missing
/// ConfigMap (not created yet) or key, an API error or an unreadable count keeps the last share
/// (errors are warned about once per failing spell). The first read is made before this returns;
/// the follower ends when `stop` fires (`None` if it fired during the first read).
pub async fn start(mut follower: Follower, stop: CancellationToken) -> Option<JoinHandle<()>> {
    tokio::select! {
        () = stop.cancelled() => return None,
        () = follower.poll_once() => {}
    }
    Some(tokio::spawn(follower.run(stop, POLL)))
}

/// The state of the follower: where to read, what to set, what was applied last.
pub struct Follower {
    config_maps: Api<ConfigMap>,
    name: String,
    /// `<namespace>/<source>-checkpoint`, for messages.
    path: String,
    limiter: Arc<Limiter>,
    total: RateSettings,
    metrics: Arc<Metrics>,
    applied: RateSettings,
    failing: bool,
}

impl Follower {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        source: &str,
        limiter: Arc<Limiter>,
        total: RateSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            config_maps: Api::namespaced(client, namespace),
            name: checkpoint_configmap_name(source),
            path: format!("{namespace}/{}", checkpoint_configmap_name(source)),
            applied: limiter.rate(),
            limiter,
            total,
            metrics,
            failing: false,
        }
    }

    async fn run(mut self, stop: CancellationToken, poll: Duration) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.poll_once() => {}
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
            }
        }
    }

    /// One GET, and the share it implies applied if it changed.
    async fn poll_once(&mut self) {
        let replicas = match tokio::time::timeout(GET_TIMEOUT, self.config_maps.get_opt(&self.name)).await {
            Ok(Ok(Some(config_map))) => {
                replicas_of(&config_map).map_err(|e| format!("reading {}: {e}", self.path))
            }
            Ok(Ok(None)) => Ok(None),
            Ok(Err(error)) => Err(format!("reading {}: {error}", self.path)),
            Err(_) => Err(format!("reading {}: no answer within {GET_TIMEOUT:?}", self.path)),
        };
        match replicas {
            Ok(replicas) => {
                if self.failing {
                    tracing::info!(configmap = %self.path, "replica count readable again");
                    self.failing = false;
                }
                // Not published yet (no ConfigMap, no key): the share stays.
                if let Some(replicas) = replicas {
                    self.apply(replicas);
                }
            }
            Err(error) => {
                if !self.failing {
                    tracing::warn!(%error, "cannot read the replica count: keeping the last rate share");
                    self.failing = true;
                }
            }
        }
    }

    fn apply(&mut self, replicas: u32) {
        let (rate, total) = (share(self.total, Some(replicas)), self.total);
        if rate == self.applied {
            return;
        }
        self.limiter.set_rate(rate);
        publish(&self.metrics, rate);
        tracing::info!(
            replicas,
            messages_per_second = rate.messages_per_second,
            bytes_per_second = rate.bytes_per_second,
            total_messages_per_second = total.messages_per_second,
            total_bytes_per_second = total.bytes_per_second,
            "rate limit share changed"
        );
        self.applied = rate;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn rate(mps: Option<u32>, bps: Option<u64>, burst: u32) -> RateSettings {
        RateSettings { messages_per_second: mps, bytes_per_second: bps, burst_seconds: burst }
    }

    #[test]
    fn no_count_or_zero_or_one_is_the_full_limit() {
        let total = rate(Some(60), Some(1_000_000), 2);
        assert_eq!(share(total, None), total);
        assert_eq!(share(total, Some(0)), total, "never a division by zero");
        assert_eq!(share(total, Some(1)), total);
    }

    #[test]
    fn divides_evenly() {
        assert_eq!(share(rate(Some(60), Some(3_000), 2), Some(3)), rate(Some(20), Some(1_000), 2));
    }

    #[test]
    fn rounds_up_so_the_shares_cover_the_total() {
        for total in [1u32, 7, 59, 60, 61, 100, 999, 1_000_000] {
            for n in 1u32..=40 {
                let s = share(rate(Some(total), Some(u64::from(total) * 1000 + 1), 1), Some(n));
                let m = s.messages_per_second.unwrap();
                let b = s.bytes_per_second.unwrap();
                assert!(m >= 1 && b >= 1);
                assert!(u64::from(m) * u64::from(n) >= u64::from(total), "{total}/{n}: {m}");
                assert!(b * u64::from(n) > u64::from(total) * 1000, "{total}/{n}: {b}");
                // And by no more than rounding: less than one unit per replica over.
                assert!(u64::from(m - 1) * u64::from(n) < u64::from(total).max(n.into()), "{total}/{n}: {m}");
            }
        }
    }

    #[test]
    fn more_replicas_than_the_rate_still_get_one_each() {
        assert_eq!(share(rate(Some(2), Some(5), 1), Some(10)), rate(Some(1), Some(1), 1));
    }

    #[test]
    fn unset_limits_stay_unset() {
        assert_eq!(share(rate(None, Some(900), 1), Some(3)), rate(None, Some(300), 1));
        assert_eq!(share(rate(Some(90), None, 1), Some(3)), rate(Some(30), None, 1));
        assert_eq!(share(rate(None, None, 1), Some(3)), rate(None, None, 1));
        assert!(!is_limited(&rate(None, None, 1)));
        assert!(is_limited(&rate(None, Some(1), 1)));
    }

    #[test]
    fn burst_follows_the_share() {
        // The bucket is burst_seconds of the rate: 3 s of 20/s, a third of 3 s of 60/s.
        let s = share(rate(Some(60), None, 3), Some(3));
        assert_eq!((s.messages_per_second, s.burst_seconds), (Some(20), 3));
    }

    #[test]
    fn the_count_is_read_from_the_replicas_key_alone() {
        let cm = |data: &[(&str, &str)]| ConfigMap {
            data: Some(
                data.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
            ),
            ..ConfigMap::default()
        };
        // What the scaler applies under at-least-once: no coordinator keys at all.
        assert_eq!(replicas_of(&cm(&[("replicas", "3")])), Ok(Some(3)));
        assert_eq!(replicas_of(&cm(&[("openEpoch", "4"), ("committedEpoch", "3")])), Ok(None));
        assert_eq!(replicas_of(&ConfigMap::default()), Ok(None));
        assert!(replicas_of(&cm(&[("replicas", "-1")])).is_err());
        assert!(replicas_of(&cm(&[("replicas", "three")])).is_err());
    }

    #[tokio::test]
    async fn follow_applies_the_published_count_and_keeps_it_through_errors() {
        use axum::http::StatusCode;

        // A fake API server: 404, then 3 replicas, then a 500, then 1 replica (from then on).
        let status = |code: u16, reason: &str| {
            format!(
                r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"{reason}","code":{code}}}"#
            )
        };
        let config_map = |n: u32| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"s-checkpoint"}},"data":{{"replicas":"{n}"}}}}"#
            )
        };
        let answers = Arc::new(std::sync::Mutex::new(vec![
            (404, status(404, "NotFound")),
            (200, config_map(3)),
            (500, status(500, "InternalError")),
            (200, config_map(1)),
        ]));
        let served = answers.clone();
        let router = axum::Router::new().route(
            "/api/v1/namespaces/ns/configmaps/s-checkpoint",
            axum::routing::get(move || {
                let answers = answers.clone();
                async move {
                    let mut answers = answers.lock().unwrap();
                    let (code, body) = if answers.len() > 1 { answers.remove(0) } else { answers[0].clone() };
                    (StatusCode::from_u16(code).unwrap(), [("content-type", "application/json")], body)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();

        let total = rate(Some(60), None, 1);
        let limiter = Arc::new(Limiter::new(total));
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let poll = Duration::from_millis(100);
        let follower = Follower::new(client, "ns", "s", limiter.clone(), total, metrics.clone());
        let task = tokio::spawn(follower.run(stop.clone(), poll));
        // Every distinct rate the limiter shows until the last answer has been served and applied.
        let mut rates = vec![limiter.rate().messages_per_second];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !(served.lock().unwrap().len() == 1 && rates.last() == Some(&Some(60)) && rates.len() > 1) {
            assert!(tokio::time::Instant::now() < deadline, "stuck at {rates:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
            let now = limiter.rate().messages_per_second;
            if rates.last() != Some(&now) {
                rates.push(now);
            }
        }
        stop.cancel();
        task.await.unwrap();
        server.abort();
        // 404: the full limit; 3: a third; the 500 changes nothing; 1: the full limit again.
        assert_eq!(rates, [Some(60), Some(20), Some(60)]);
        assert!(metrics.encode().contains("sluice_reader_rate_limit_messages_per_second 60"));
    }
}
