//! The checkpoint protocol's steps on every sink that takes part in epochs: pre-commit, commit,
//! abort, each retried with the reader's backoff.
//!
//! Why retried until done: sink epoch steps are idempotent by contract, and the protocol has no
//! other way to learn that a pre-commit or commit failed: an epoch whose commit never finishes
//! would hold its receipts and its lease entry forever. An abort is tried a bounded number of
//! times: an aborted output is never made visible anyway, the abort only frees what was staged.

use std::sync::Arc;
use std::time::Duration;

use sluice_protocol::EpochKey;
use tokio_util::sync::CancellationToken;

use super::{Sink, SinkError, Sinks};
use crate::process::backoff::retry;

const FIRST_RETRY: Duration = Duration::from_millis(200);
const LONGEST_RETRY: Duration = Duration::from_secs(5);
const ABORT_ATTEMPTS: usize = 3;

/// One step of an epoch in a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochStep {
    PreCommit,
    Commit,
    Abort,
}

impl EpochStep {
    /// For logs and the `error_type` label.
    pub fn name(self) -> &'static str {
        match self {
            EpochStep::PreCommit => "pre_commit",
            EpochStep::Commit => "commit",
            EpochStep::Abort => "abort",
        }
    }
}

impl Sinks {
    /// Every sink that takes part in epochs: the routed sinks and the dead-letter sink.
    pub fn every(&self) -> impl Iterator<Item = &Arc<dyn Sink>> {
        self.sinks.iter().map(|s| &s.sink).chain(self.dead_letter.iter().map(|d| d.sink()))
    }

    /// Pre-commit `key` in every sink. `false` if `stop` came first, or `wanted` said after a
    /// failure that nothing will use the answer any more. `failed` sees every failed attempt.
    pub async fn pre_commit(
        &self,
        key: &EpochKey,
        stop: &CancellationToken,
        wanted: impl Fn() -> bool,
        failed: impl Fn(EpochStep, &SinkError),
    ) -> bool {
        self.on_every(EpochStep::PreCommit, key, stop, None, |e| {
            failed(EpochStep::PreCommit, e);
            wanted()
        })
        .await
    }

    /// Make `key`'s output visible in every sink (idempotent; `key` may be another reader's or an
    /// earlier incarnation's: whoever finds a committed epoch finishes it). `false` if `stop` came
    /// first.
    pub async fn commit(
        &self,
        key: &EpochKey,
        stop: &CancellationToken,
        failed: impl Fn(EpochStep, &SinkError),
    ) -> bool {
        self.on_every(EpochStep::Commit, key, stop, None, |e| {
            failed(EpochStep::Commit, e);
            true
        })
        .await
    }

    /// Drop `key`'s output in every sink, best effort.
    pub async fn abort(&self, key: &EpochKey, failed: impl Fn(EpochStep, &SinkError)) {
        let never = CancellationToken::new();
        self.on_every(EpochStep::Abort, key, &never, Some(ABORT_ATTEMPTS), |e| {
            failed(EpochStep::Abort, e);
            true
        })
        .await;
    }

    /// `step` on each sink in turn, each retried until it succeeds (with `attempts`, until they ran out;
    /// the next sink is tried all the same). `false` if `stop` fired or `go_on` said stop.
    async fn on_every(
        &self,
        step: EpochStep,
        key: &EpochKey,
        stop: &CancellationToken,
        attempts: Option<usize>,
        mut go_on: impl FnMut(&SinkError) -> bool,
    ) -> bool {
        for sink in self.every() {
            let call = || match step {
                EpochStep::PreCommit => sink.pre_commit(key),
                EpochStep::Commit => sink.commit(key),
                EpochStep::Abort => sink.abort(key),
            };
            let done = retry(FIRST_RETRY, LONGEST_RETRY, attempts, stop, call, &mut go_on).await;
            if done.is_none() && attempts.is_none() {
                return false;
            }
        }
        true
    }
}
