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
//! Why a function and no metric here: the reader labels by queue, the operator also by the source
//! whose work sent the request; each binary keeps its family and its label step ([`Counter`]: a
//! plain function ([`Count`]), or a value such as the reader's own per-reader count in an `Arc`).

use aws_credential_types::provider::{ProvideCredentials, future};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, Input,
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
    fn count(&self, request: &Request<'_>);
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
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, api) =
            cfg.load::<Metadata>().map_or(("unknown", "unknown"), |m| (m.service(), m.name()));
        let queue = cfg.load::<QueueOfCall>().map_or("", |q| q.0.as_str());
        self.count.count(&Request { service, api, queue });
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
    fn queue_names_from_urls_and_names() {
        assert_eq!(queue_name("http://127.0.0.1:4566/000000000000/orders"), "orders");
        assert_eq!(queue_name("https://sqs.eu-west-1.amazonaws.com/1/orders.fifo/"), "orders.fifo");
        assert_eq!(queue_name("orders"), "orders");
    }
}
