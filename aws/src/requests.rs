//! Every request a client sends to AWS, handed to the binary's own counter with its service, API
//! and queue.
//!
//! Why an SDK interceptor: AWS bills per request, retries included, so the count must see each
//! attempt that goes on the wire, whoever sent it. An interceptor added to every client a binary
//! builds counts at the one place all requests pass, per attempt (`read_before_transmit`),
//! without a call site remembering to. STS is the exception: the credential chain builds its own
//! STS client, so an assumed role is counted where its credentials are asked for
//! ([`CountedCredentials`]).
//!
//! AWS bills an SQS request by its payload: "Each 64 KB chunk of a payload is billed as 1 request
//! (for example, an API action with a 256 KB payload is billed as 4 requests)" (Amazon SQS
//! pricing, aws.amazon.com/sqs/pricing). With messages of up to 1 MiB since 2025, one
//! ReceiveMessage of ten such messages is billed as 160 requests, so the interceptor also tells
//! the counter what each answered attempt is billed as ([`Counter::billed`], [`billed_requests`]).
//!
//! Why a function and no metric here: the reader labels by queue, the operator also by the source
//! whose work sent the request; each binary keeps its family and its label step ([`Counter`]: a
//! plain function ([`Count`]), or a value such as the reader's own per-reader count in an `Arc`).

use aws_credential_types::provider::{ProvideCredentials, future};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextRef, Input,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

/// One request about to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The service as the SDK names it (`SQS`, `S3`, `sts`); the counters lower-case it.
    pub service: &'a str,
    /// The API (`ReceiveMessage`, `HeadBucket`, `AssumeRole`).
    pub api: &'a str,
    /// The queue's name; empty for calls that name none (S3, STS).
    pub queue: &'a str,
}

/// A binary's label step: count one request.
pub type Count = fn(&Request<'_>);

/// What counts the requests: a function, or a value that keeps the count (shared in an `Arc`).
pub trait Counter: std::fmt::Debug + Send + Sync + 'static {
    /// One attempt about to be sent.
    fn count(&self, request: &Request<'_>);

    /// An attempt that was answered, and the requests AWS bills it as (1 but for SQS payloads
    /// over 64 KiB). Nothing by default: a binary that meters no cost ignores it.
    fn billed(&self, _request: &Request<'_>, _requests: u64) {}
}

/// SQS's billing unit: "each 64 KB chunk of a payload" (Amazon SQS pricing), 64 KiB.
pub const BILLED_CHUNK_BYTES: u64 = 64 * 1024;

/// The requests AWS bills for an SQS call whose request body and answer body have these sizes:
/// one per started 64 KiB chunk of the larger (a send's payload is its request, a receive's its
/// answer), at least one. The bodies include the protocol's envelope (JSON field names, ids,
/// receipt handles), so a payload just under a chunk boundary may count one more than AWS bills.
pub fn billed_requests(request_bytes: u64, answer_bytes: u64) -> u64 {
    request_bytes.max(answer_bytes).div_ceil(BILLED_CHUNK_BYTES).max(1)
}

impl Counter for Count {
    fn count(&self, request: &Request<'_>) {
        self(request);
    }
}

impl<C: Counter> Counter for std::sync::Arc<C> {
    fn count(&self, request: &Request<'_>) {
        C::count(self, request);
    }

    fn billed(&self, request: &Request<'_>, requests: u64) {
        C::billed(self, request, requests);
    }
}

/// The interceptor to add to every SQS and S3 client a binary builds.
#[derive(Clone, Copy, Debug)]
pub struct CountRequests<C = Count> {
    count: C,
}

impl<C> CountRequests<C> {
    pub const fn new(count: C) -> Self {
        Self { count }
    }
}

/// The queue an operation names, read from its input before it is serialized.
#[derive(Debug)]
struct QueueOfCall(String);

impl Storable for QueueOfCall {
    type Storer = StoreReplace<Self>;
}

/// The body size of the attempt on the wire, for its billing once it is answered.
#[derive(Debug)]
struct RequestBytes(u64);

impl Storable for RequestBytes {
    type Storer = StoreReplace<Self>;
}

impl<C: Counter> Intercept for CountRequests<C> {
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
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let bytes = context.request().body().content_length().unwrap_or(0);
        self.count.count(&request_of(cfg));
        cfg.interceptor_state().store_put(RequestBytes(bytes));
        Ok(())
    }

    /// Once per answered attempt: what AWS bills it as (an attempt that never reached AWS is
    /// not billed).
    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let response = context.response();
        let answer = response
            .headers()
            .get("content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .or_else(|| response.body().content_length())
            .unwrap_or(0);
        let request = request_of(cfg);
        let sent = cfg.load::<RequestBytes>().map_or(0, |b| b.0);
        let sqs = request.service.eq_ignore_ascii_case("sqs");
        self.count.billed(&request, if sqs { billed_requests(sent, answer) } else { 1 });
        Ok(())
    }
}

/// The call being made, as the SDK's metadata and the queue stored before serialization name it.
fn request_of(cfg: &ConfigBag) -> Request<'_> {
    let (service, api) = cfg.load::<Metadata>().map_or(("unknown", "unknown"), |m| (m.service(), m.name()));
    let queue = cfg.load::<QueueOfCall>().map_or("", |q| q.0.as_str());
    Request { service, api, queue }
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

/// The last path segment of a queue URL (the URL itself when it has none; a name stays a name).
pub fn queue_name(queue_url: &str) -> &str {
    queue_url.trim_end_matches('/').rsplit('/').next().unwrap_or(queue_url)
}

/// An assumed role's credentials, counting one STS AssumeRole per call: the provider does not
/// cache (the clients' identity cache asks again only when the credentials expire), so each call
/// it answers is one request to STS.
#[derive(Debug)]
pub struct CountedCredentials<P, C = Count> {
    provider: P,
    count: C,
}

impl<P, C> CountedCredentials<P, C> {
    pub fn new(provider: P, count: C) -> Self {
        Self { provider, count }
    }
}

impl<P: ProvideCredentials, C: Counter> ProvideCredentials for CountedCredentials<P, C> {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.count.count(&Request { service: "sts", api: "AssumeRole", queue: "" });
        self.provider.provide_credentials()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_started_64_kib_chunk_is_billed() {
        assert_eq!(billed_requests(0, 0), 1);
        assert_eq!(billed_requests(300, 120), 1);
        assert_eq!(billed_requests(65_536, 200), 1);
        assert_eq!(billed_requests(65_537, 200), 2);
        // The pricing page's example: a 256 KB payload is billed as 4 requests.
        assert_eq!(billed_requests(200, 256 * 1024), 4);
        // Ten 1 MiB messages in one answer.
        assert_eq!(billed_requests(300, 10 * 1_048_576), 160);
    }

    #[test]
    fn queue_names_from_urls_and_names() {
        assert_eq!(queue_name("http://127.0.0.1:4566/000000000000/orders"), "orders");
        assert_eq!(queue_name("https://sqs.eu-west-1.amazonaws.com/1/orders.fifo/"), "orders.fifo");
        assert_eq!(queue_name("orders"), "orders");
    }
}
