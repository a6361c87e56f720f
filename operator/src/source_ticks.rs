//! Every SqsSource in the cluster, listed once a tick: what the operator's follower tasks walk
//! (checkpoint coordination, sink health).
//!
//! Why a tick and a list rather than a watch: each step reads other objects (leases, reports) that
//! change without the source changing, so the tasks must look again anyway; a fixed tick bounds
//! their latency whatever happens to watch connections. A failing list (the API server restarting,
//! RBAC removed) is one WARN line when it starts and one INFO line when it ends, not one per tick:
//! the coordinator ticks twice a second.

use std::collections::HashSet;
use std::fmt::Display;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams};
use sluice_crds::SqsSource;
use tokio_util::sync::CancellationToken;

use crate::scope::Scope;

/// The sources, tick after tick, for one task.
pub struct SourceTicks {
    api: Api<SqsSource>,
    tick: Duration,
    /// The task's name in log lines.
    task: &'static str,
    /// What goes stale while the list fails, said in the WARN line.
    stale: &'static str,
    failing_since: Option<Instant>,
}

impl SourceTicks {
    pub fn new(
        client: Client,
        scope: &Scope,
        tick: Duration,
        task: &'static str,
        stale: &'static str,
    ) -> Self {
        Self { api: scope.api(&client), tick, task, stale, failing_since: None }
    }

    /// Every source at the next tick whose list succeeds; `None` once `shutdown` is cancelled.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Vec<SqsSource>> {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(self.tick) => {}
            }
            match self.api.list(&ListParams::default()).await {
                Ok(list) => {
                    if let Some(since) = self.failing_since.take() {
                        tracing::info!(
                            task = self.task,
                            failed_for_s = since.elapsed().as_secs(),
                            "listing SqsSources again"
                        );
                    }
                    return Some(list.items);
                }
                Err(error) => {
                    if self.failing_since.is_none() {
                        let error = crate::error::sources_line(&error);
                        tracing::warn!(task = self.task, %error,
                            "cannot list SqsSources; {} until it works again (retried every {} ms)",
                            self.stale, self.tick.as_millis());
                        self.failing_since = Some(Instant::now());
                    }
                }
            }
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
