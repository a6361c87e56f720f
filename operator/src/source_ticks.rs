//! Every SqsSource in the cluster, once a tick: what the operator's follower tasks walk
//! (checkpoint coordination, sink health, replay).
//!
//! Why a tick: each step reads other objects (leases, reports) that change without the source
//! changing, so the tasks must look again anyway; a fixed tick bounds their latency. Why the sources
//! come from a watch-fed cache rather than a list at each tick: the coordinator ticks twice a
//! second, and listing a thousand sources that often would cost the API server (and this process)
//! far more than the steps themselves, for objects that rarely change. The cache is the operator's
//! one `SourceCache`; while its watch fails, the tasks keep stepping the sources last seen.

use std::collections::HashSet;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use sluice_crds::SqsSource;
use tokio_util::sync::CancellationToken;

use crate::source_cache::SourceCache;

/// The sources, tick after tick, for one task.
pub struct SourceTicks {
    sources: SourceCache,
    tick: Duration,
}

impl SourceTicks {
    /// Every `tick`, the sources of `sources`.
    pub fn new(sources: SourceCache, tick: Duration) -> Self {
        Self { sources, tick }
    }

    /// Every source at the next tick once the cache has been filled; `None` once `shutdown` is
    /// cancelled.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Vec<Arc<SqsSource>>> {
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(self.tick) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => None,
            ready = self.sources.ready() => ready.then(|| self.sources.all()),
        }
    }
}

/// The sources whose step fails, so that a failure is one WARN line when it starts and one INFO
/// line when it ends rather than one per tick.
#[derive(Default)]
pub struct FailingSources(HashSet<(String, String)>);

impl FailingSources {
    /// Logs `result` of `what` for the source `key` (namespace, name) if it starts or ends a
    /// failure, and answers its value if it succeeded.
    pub fn record<T, E: Display>(
        &mut self,
        key: &(String, String),
        result: Result<T, E>,
        what: &str,
    ) -> Option<T> {
        match result {
            Ok(value) => {
                if self.0.remove(key) {
                    tracing::info!(namespace = %key.0, source = %key.1, "{what} works again");
                }
                Some(value)
            }
            Err(error) => {
                if self.0.insert(key.clone()) {
                    tracing::warn!(namespace = %key.0, source = %key.1, %error,
                        "{what} failed; retried every tick, logged again when it works");
                }
                None
            }
        }
    }

    /// Forgets sources no longer listed.
    pub fn retain(&mut self, listed: &HashSet<(String, String)>) {
        self.0.retain(|key| listed.contains(key));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use sluice_logs::EnvFilter;
    use sluice_logs::capture::Captured;

    use super::FailingSources;

    /// Five failing ticks then two good ones give one WARN and one INFO line; the value of a good
    /// step is passed through.
    #[test]
    fn a_failure_is_logged_when_it_starts_and_when_it_ends() {
        let out = Captured::default();
        let subscriber =
            sluice_logs::json_subscriber(EnvFilter::new("info"), out.clone(), Default::default());
        let key = ("shop".to_owned(), "orders".to_owned());
        let mut failing = FailingSources::default();
        let answers: Vec<Option<u8>> = tracing::subscriber::with_default(subscriber, || {
            let mut answers = Vec::new();
            for _ in 0..5 {
                answers.push(failing.record(&key, Err::<u8, _>("409 Conflict"), "checkpoint step"));
            }
            for value in [1, 2] {
                answers.push(failing.record(&key, Ok::<u8, &str>(value), "checkpoint step"));
            }
            answers
        });
        assert_eq!(answers, [None, None, None, None, None, Some(1), Some(2)]);
        let lines = out.lines();
        let levels: Vec<&str> = lines.iter().filter_map(|l| l["level"].as_str()).collect();
        assert_eq!(levels, ["WARN", "INFO"], "{}", out.text());
        assert_eq!(lines[0]["error"], "409 Conflict");
        assert_eq!(lines[0]["source"], "orders");
        assert_eq!(lines[1]["message"], "checkpoint step works again");
    }

    #[test]
    fn sources_no_longer_listed_are_forgotten() {
        let key = ("shop".to_owned(), "orders".to_owned());
        let mut failing = FailingSources::default();
        failing.record(&key, Err::<(), _>("gone"), "sink health");
        failing.retain(&HashSet::new());
        assert!(failing.0.is_empty());
    }
}
