//! Every request the reader sends to AWS, counted by service, API and queue
//! (`sluice_reader_aws_requests_total`), and requests per delivered message over a window.
//!
//! Why an SDK interceptor: AWS bills per request, retries included, so the count must see each
//! attempt that goes on the wire, whoever sent it (pollers, acker, heartbeat, sinks, payload
//! fetches). An interceptor added to every client the reader builds counts at the one place all
//! of them pass, per attempt (`read_before_transmit`), without a call site remembering to. STS is
//! the exception: the credential chain builds its own STS client, so an assumed role is counted
//! where its credentials are asked for ([`CountedCredentials`]).
//!
//! Why a process-wide family: clients are built in many places that do not hold the metrics; the
//! registry registers this same family (`process::metrics`).

use std::collections::VecDeque;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_credential_types::provider::{ProvideCredentials, future};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, Input,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::process::metrics::queue_name;

/// One series per service, API and queue (empty for calls that name no queue: S3, STS).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub service: String,
    pub api: String,
    pub queue: String,
}

/// The requests sent, by label; registered as `sluice_reader_aws_requests_total`.
pub static REQUESTS: LazyLock<Family<RequestLabel, Counter>> = LazyLock::new(Family::default);
/// The same requests, summed (what [`PerMessage`] reads).
static TOTAL: AtomicU64 = AtomicU64::new(0);

/// Every request sent so far, all services together.
pub fn requests_total() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

fn count(service: &str, api: &str, queue: &str) {
    TOTAL.fetch_add(1, Ordering::Relaxed);
    let label =
        RequestLabel { service: service.to_ascii_lowercase(), api: api.to_owned(), queue: queue.to_owned() };
    REQUESTS.get_or_create(&label).inc();
}

/// The interceptor to add to every SQS and S3 client the reader builds.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountRequests;

/// The queue an operation names, read from its input before it is serialized.
#[derive(Debug)]
struct QueueOfCall(String);

impl Storable for QueueOfCall {
    type Storer = StoreReplace<Self>;
}

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "CountRequests"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(queue) = queue_of(context.input()) {
            cfg.interceptor_state().store_put(QueueOfCall(queue_name(queue).to_owned()));
        }
        Ok(())
    }

    /// Once per attempt: a retried call is billed again, so it is counted again.
    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, api) =
            cfg.load::<Metadata>().map_or(("unknown", "unknown"), |m| (m.service(), m.name()));
        let queue = cfg.load::<QueueOfCall>().map_or("", |q| q.0.as_str());
        count(service, api, queue);
        Ok(())
    }
}

/// The queue URL (or, for GetQueueUrl, the name) of an SQS operation's input.
fn queue_of(input: &Input) -> Option<&str> {
    use aws_sdk_sqs::operation as op;
    macro_rules! queue_url_of {
        ($($input:ty),* $(,)?) => {
            $(if let Some(i) = input.downcast_ref::<$input>() {
                return i.queue_url();
            })*
        };
    }
    queue_url_of!(
        op::receive_message::ReceiveMessageInput,
        op::delete_message_batch::DeleteMessageBatchInput,
        op::change_message_visibility_batch::ChangeMessageVisibilityBatchInput,
        op::get_queue_attributes::GetQueueAttributesInput,
        op::send_message::SendMessageInput,
        op::send_message_batch::SendMessageBatchInput,
        op::delete_message::DeleteMessageInput,
        op::change_message_visibility::ChangeMessageVisibilityInput,
    );
    input.downcast_ref::<op::get_queue_url::GetQueueUrlInput>().and_then(|i| i.queue_name())
}

/// An assumed role's credentials, counting one STS AssumeRole per call: the provider does not
/// cache (the clients' identity cache does), so each call it answers is one request to STS.
#[derive(Debug)]
pub struct CountedCredentials<P>(pub P);

impl<P: ProvideCredentials> ProvideCredentials for CountedCredentials<P> {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        count("sts", "AssumeRole", "");
        self.0.provide_credentials()
    }
}

/// Requests per delivered message over a sliding window: what a quiet queue costs its users per
/// message (0.2 is the floor with full batches: one receive and one delete per ten messages).
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
