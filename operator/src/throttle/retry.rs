//! kube's retry policy, observed: every 429 it retries is counted and timed, and its episode
//! logged once.
//!
//! Why wrap kube's `RetryPolicy` rather than write one: it already waits for an integer
//! `Retry-After` (the form API priority and fairness sends) or its own exponential backoff,
//! whichever is longer, and clones only bodies that can be replayed. What it lacks is anything a
//! person or an alert can see, which this adds without changing when requests are sent.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use tower::BoxError;
use tower::retry::Policy;

use super::episode::{Episode, Seen, Throttling};
use super::metrics::ThrottleMetrics;

/// Without a throttled answer for this long after its last retry, an episode is over (and the
/// operator ready again): longer than the 1-8 s Retry-After API priority and fairness usually
/// asks for, so one episode is not logged as many.
pub const QUIET: Duration = Duration::from_secs(10);

/// The throttling state the retries of every request share.
#[derive(Clone, Debug)]
pub struct ApiThrottle {
    throttling: Arc<Mutex<Throttling>>,
    metrics: ThrottleMetrics,
}

impl ApiThrottle {
    pub fn new(metrics: ThrottleMetrics) -> Self {
        Self { throttling: Arc::new(Mutex::new(Throttling::new(QUIET))), metrics }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Throttling) -> T) -> T {
        f(&mut self.throttling.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records a throttled answer to `request` whose retry waits `wait`; WARN when it starts an
    /// episode.
    fn throttled(&self, method: &http::Method, path: &str, retry_after: Option<&str>, wait: Duration) {
        self.metrics.responses.inc();
        self.metrics.waited_seconds.inc_by(wait.as_secs_f64());
        self.metrics.throttled.set(1);
        if let Seen::Began { after } = self.with(|t| t.throttled(Instant::now(), wait)) {
            if let Some(ended) = after {
                log_end(&ended);
            }
            tracing::warn!(
                method = %method,
                path,
                retry_after = retry_after.unwrap_or("none"),
                wait_s = millis(wait),
                "the Kubernetes API server is throttling this operator (429 Too Many Requests from API priority and fairness): requests wait for its Retry-After and are retried, so reconciles, scaling and checkpoint epochs run late; the operator reports not ready until 10 s pass without a 429; see sluice_operator_api_throttled_responses_total"
            );
        }
    }

    /// Ends an episode that has been quiet long enough (INFO with its totals); answers whether
    /// one is still running.
    pub fn tick(&self) -> bool {
        if let Some(ended) = self.with(|t| t.tick(Instant::now())) {
            self.metrics.throttled.set(0);
            log_end(&ended);
        }
        self.with(|t| t.active())
    }
}

/// The INFO line that closes an episode, with its totals.
fn log_end(ended: &Episode) {
    tracing::info!(
        lasted_s = millis(ended.last.saturating_duration_since(ended.started)),
        throttled_responses = ended.responses,
        waited_s = millis(ended.waited),
        "the Kubernetes API server stopped throttling this operator"
    );
}

/// Seconds to the millisecond, for log lines a person reads.
fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// kube's [`RetryPolicy`] plus the bookkeeping of [`ApiThrottle`].
#[derive(Clone)]
pub struct ObservedRetry {
    inner: RetryPolicy,
    throttle: ApiThrottle,
}

impl ObservedRetry {
    /// At most 8 retries, from 100 ms doubling to at most 30 s (or the server's longer
    /// `Retry-After`). Why not kube's default (15 retries up to 1,000 s): a request that waits
    /// minutes holds a reconcile or an epoch barrier that long; past about a minute of retries the
    /// caller's own backoff (requeue, next tick) serves better, and its failure is counted there.
    pub fn new(throttle: ApiThrottle) -> Self {
        let inner = RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(30), 8, true)
            .unwrap_or_else(|_| RetryPolicy::server_retry());
        Self { inner, throttle }
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ObservedRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        let retry_after = match result {
            Ok(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => Some(
                response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            ),
            _ => None,
        };
        let sleep = self.inner.retry(req, result);
        if let Some(retry_after) = retry_after {
            // A 429 past the last retry goes to the caller: counted, with nothing waited here.
            let wait = sleep.as_ref().map_or(Duration::ZERO, |s| {
                s.deadline().saturating_duration_since(tokio::time::Instant::now())
            });
            self.throttle.throttled(req.method(), req.uri().path(), retry_after.as_deref(), wait);
        }
        sleep
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(&mut self.inner, req)
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
