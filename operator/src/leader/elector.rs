//! Claims, renews and releases the operator's Lease.
//!
//! Why get + create/replace rather than an apply patch: a replace carries the resourceVersion of
//! the read, so when two replicas race, the API server accepts exactly one write and the other
//! gets 409 Conflict and stands by; there is no window in which both believe they lead. A leader
//! that cannot renew within the lease duration reports the loss, and the process stops leading
//! (it exits and restarts as a standby) rather than keep writing beside a new leader.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use super::lease::{Step, claim, decide, release};
use crate::access::ApiCall;

pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("coordination.k8s.io", "leases", "get"),
    ApiCall::new("coordination.k8s.io", "leases", "create"),
    ApiCall::new("coordination.k8s.io", "leases", "update"),
];

/// Client-go's defaults (15 s lease, 10 s renew deadline, 2 s retry), for the same reasons: a
/// standby that checks every 2 s takes over at most 2 s after the lease ran out, so a crashed
/// leader is replaced within 17 s of its last renewal (at most 15 s after a crash that came
/// right after it, the usual case, since renewals are 2 s apart); a leader that cannot renew for
/// 10 s steps down 5 s before a standby may take over, so the two never act at once, even when a
/// renewal hangs (a throttled or unreachable API server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a lease lives without renewal.
    pub duration: Duration,
    /// How long the holder keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the holder renews, and a standby retries.
    pub retry: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
}

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, timings: LeaseTimings) -> Self {
        Self { api, name: name.to_owned(), identity: identity.to_owned(), timings }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.timings.duration.as_secs()).unwrap_or(i32::MAX).max(1)
    }

    /// One round: read the Lease and claim or renew it if we may. Ok(true): we hold it now.
    pub async fn try_once(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let step = decide(spec, &self.identity, now);
        if step == Step::Wait {
            return Ok(false);
        }
        let next = claim(spec, &self.identity, now, self.duration_seconds(), step);
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                    spec: Some(next),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(next);
                self.api.replace(&self.name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(_) => {
                if step == Step::Acquire {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_once().await {
                Ok(true) => return,
                Ok(false) => tracing::debug!(lease = %self.name, "standing by"),
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "could not read or claim the lease"),
            }
            tokio::time::sleep(self.timings.retry).await;
        }
    }

    /// Renews while leading; returns when leadership is lost (another holder, or no successful
    /// renewal within the renew deadline: a renewal still waiting then, say on a throttled API
    /// server, counts as failed).
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timings.retry).await;
            let left = self.timings.renew_deadline.saturating_sub(last_renewal.elapsed());
            match tokio::time::timeout(left, self.try_once()).await {
                Ok(Ok(true)) => last_renewal = tokio::time::Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %self.name, "another replica holds the lease");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(lease = %self.name, error = %e, "could not renew the lease"),
                Err(_) => {
                    tracing::warn!(lease = %self.name, "a lease renewal is still waiting for the API server")
                }
            }
            if last_renewal.elapsed() >= self.timings.renew_deadline {
                tracing::warn!(
                    lease = %self.name,
                    renew_deadline_s = self.timings.renew_deadline.as_secs(),
                    "no lease renewal within the renew deadline"
                );
                return;
            }
        }
    }

    /// Steps down so a standby takes over at once (best-effort, on graceful shutdown).
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_ref() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        lease.spec = Some(release(spec, Timestamp::now()));
        if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(lease = %self.name, error = %e, "could not release the lease");
        }
    }
}

#[cfg(test)]
#[path = "elector_tests.rs"]
mod tests;
