//! Every request the reader sends to AWS, counted by service, API and queue
//! (`sluice_reader_aws_requests_total`), and requests per delivered message over a window.
//!
//! The interceptor on every client the reader builds (pollers, acker, heartbeat, sinks, payload
//! fetches) and the assumed role's credentials count once per attempt (`sluice_aws::requests`)
//! into this reader's [`Requests`]; this module is the reader's label step.
//!
//! Why a value per reader and no process-wide family: two readers in one process (the tests, the
//! benches) must not count each other's requests. The interceptor holds the reader's `Requests` in
//! an `Arc`, the reader's `Metrics` registers its family, and whatever builds a client is handed
//! it (`SqsClients`, `SinkContext::requests`, `payload::build`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sluice_aws::requests::{CountRequests, CountedCredentials, Request};

/// One series per service, API and queue (empty for calls that name no queue: S3, STS).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub service: String,
    pub api: String,
    pub queue: String,
}

/// One reader's requests: by label (registered as `sluice_reader_aws_requests_total`) and summed;
/// and what AWS bills them as (`sluice_reader_aws_billed_requests_total`: SQS bills each 64 KiB
/// chunk of a payload as one request, `sluice_aws::requests`), summed for [`PerMessage`].
#[derive(Debug, Default)]
pub struct Requests {
    by_label: Family<RequestLabel, Counter>,
    total: AtomicU64,
    billed_by_label: Family<RequestLabel, Counter>,
    billed_total: AtomicU64,
}

impl Requests {
    /// The family the reader's registry registers (the same counters).
    pub fn family(&self) -> Family<RequestLabel, Counter> {
        self.by_label.clone()
    }

    /// Every request sent so far, all services together.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The billed family the reader's registry registers.
    pub fn billed_family(&self) -> Family<RequestLabel, Counter> {
        self.billed_by_label.clone()
    }

    /// What the answered requests so far are billed as, all services together.
    pub fn billed_total(&self) -> u64 {
        self.billed_total.load(Ordering::Relaxed)
    }

    /// The count of one label so far.
    pub fn counted(&self, label: &RequestLabel) -> u64 {
        self.by_label.get_or_create(label).get()
    }

    /// The interceptor to add to every SQS and S3 client the reader builds.
    pub fn interceptor(self: &Arc<Self>) -> CountRequests<Arc<Self>> {
        CountRequests::new(self.clone())
    }

    /// An assumed role's credentials, each AssumeRole counted.
    pub fn credentials<P>(self: &Arc<Self>, provider: P) -> CountedCredentials<P, Arc<Self>> {
        CountedCredentials::new(provider, self.clone())
    }
}

fn label_of(request: &Request<'_>) -> RequestLabel {
    RequestLabel {
        service: request.service.to_ascii_lowercase(),
        api: request.api.to_owned(),
        queue: request.queue.to_owned(),
    }
}

impl sluice_aws::requests::Counter for Requests {
    fn count(&self, request: &Request<'_>) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.by_label.get_or_create(&label_of(request)).inc();
    }

    fn billed(&self, request: &Request<'_>, requests: u64) {
        self.billed_total.fetch_add(requests, Ordering::Relaxed);
        self.billed_by_label.get_or_create(&label_of(request)).inc_by(requests);
    }
}

/// Billed requests per delivered message over a sliding window: what a queue costs its users per
/// message (0.2 is the floor with full batches of messages under 64 KiB: one receive and one
/// delete per ten messages; a 1 MiB message adds 16 to its receive alone).
/// The report and the status read it; it holds only samples of the two running totals.
#[derive(Debug)]
pub struct PerMessage {
    window: Duration,
    samples: VecDeque<(Instant, u64, u64)>,
}

impl PerMessage {
    pub fn new(window: Duration) -> Self {
        Self { window, samples: VecDeque::new() }
    }

    /// Record the running totals at `now` and answer the ratio over the window; `None` while no
    /// message was delivered in it (an idle reader's cost is its requests per hour instead).
    pub fn observe(&mut self, now: Instant, requests: u64, delivered: u64) -> Option<f64> {
        self.samples.push_back((now, requests, delivered));
        while self.samples.len() > 2
            && self.samples.get(1).is_some_and(|(t, _, _)| now.duration_since(*t) >= self.window)
        {
            self.samples.pop_front();
        }
        let (_, r0, d0) = *self.samples.front()?;
        let messages = delivered.saturating_sub(d0);
        (messages > 0).then(|| requests.saturating_sub(r0) as f64 / messages as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_message_looks_back_one_window() {
        let mut w = PerMessage::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(w.observe(t0, 100, 1000), None);
        assert_eq!(w.observe(t0 + Duration::from_secs(30), 300, 2000), Some(0.2));
        // The first sample has left the window: only the last 60 s count.
        assert_eq!(w.observe(t0 + Duration::from_secs(90), 2300, 3000), Some(2.0));
        assert_eq!(w.observe(t0 + Duration::from_secs(200), 2400, 3000), None);
    }
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod localstack_tests;
