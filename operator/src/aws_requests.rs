//! Every request the operator sends to AWS (queue checks, bucket checks, the scaler's
//! GetQueueAttributes, assumed roles), counted by source, service, API and queue
//! (`sluice_operator_aws_requests_total`).
//!
//! Why an interceptor plus a task-local source: the SQS and S3 clients are shared by every source
//! on the same endpoint, so the client cannot say whose request it sends; the task that works for
//! a source can. [`for_source`] names the source around that work, and the interceptor on every
//! client reads it once per attempt (a retry is billed, so it is counted).

use std::future::Future;
use std::sync::LazyLock;

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

/// One series per source, service, API and queue (the queue's name; empty for calls that name
/// none: HeadBucket, AssumeRole).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub namespace: String,
    pub source: String,
    pub service: String,
    pub api: String,
    pub queue: String,
}

/// Registered as `sluice_operator_aws_requests_total` (`crate::metrics`).
pub static REQUESTS: LazyLock<Family<RequestLabels, Counter>> = LazyLock::new(Family::default);

tokio::task_local! {
    static SOURCE: (String, String);
}

/// Run `work` with its AWS requests counted for the source `namespace`/`name`.
pub async fn for_source<F: Future>(namespace: &str, name: &str, work: F) -> F::Output {
    SOURCE.scope((namespace.to_owned(), name.to_owned()), work).await
}

fn count(service: &str, api: &str, queue: &str) {
    let (namespace, source) = SOURCE.try_with(Clone::clone).unwrap_or_default();
    let service = service.to_ascii_lowercase();
    let labels = RequestLabels { namespace, source, service, api: api.to_owned(), queue: queue.to_owned() };
    REQUESTS.get_or_create(&labels).inc();
}

/// The queue an operation names, read from its input before it is serialized.
#[derive(Debug)]
struct QueueOfCall(String);

impl Storable for QueueOfCall {
    type Storer = StoreReplace<Self>;
}

/// The queue of the operator's SQS calls: GetQueueAttributes names it by URL (its last segment is
/// the name), GetQueueUrl by name.
fn queue_of(input: &Input) -> Option<&str> {
    use aws_sdk_sqs::operation::{get_queue_attributes, get_queue_url};
    if let Some(i) = input.downcast_ref::<get_queue_attributes::GetQueueAttributesInput>() {
        return i.queue_url().map(|url| url.trim_end_matches('/').rsplit('/').next().unwrap_or(url));
    }
    input.downcast_ref::<get_queue_url::GetQueueUrlInput>().and_then(|i| i.queue_name())
}

/// The interceptor to add to every SQS and S3 client the operator builds.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountRequests;

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
            cfg.interceptor_state().store_put(QueueOfCall(queue.to_owned()));
        }
        Ok(())
    }

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

/// An assumed role's credentials, counting one STS AssumeRole per call (the provider itself
/// does not cache; the clients' identity cache asks it again only when the credentials expire).
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

#[cfg(test)]
mod tests {
    use aws_config::{BehaviorVersion, Region};
    use aws_sdk_sqs::config::Credentials;

    use super::*;
    use crate::queue_check::sqs::SqsInspector;

    fn counted(namespace: &str, source: &str, api: &str) -> u64 {
        let labels = RequestLabels {
            namespace: namespace.into(),
            source: source.into(),
            service: "sqs".into(),
            api: api.into(),
            queue: "orders".into(),
        };
        REQUESTS.get_or_create(&labels).get()
    }

    /// A port nothing listens on: every attempt is refused and retried (standard mode: 3), and
    /// each is counted for the source whose work sent it.
    #[tokio::test]
    async fn each_attempt_is_counted_for_the_source_that_sent_it() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let base = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "operator-tests"))
            .endpoint_url(format!("http://{closed}"))
            .load()
            .await;
        let client = SqsInspector::new(base).client(None, None);
        let url = format!("http://{closed}/000000000000/orders");
        let call = client.get_queue_attributes().queue_url(&url).send();
        assert!(for_source("shop", "orders", call).await.is_err(), "nothing listens there");
        assert_eq!(counted("shop", "orders", "GetQueueAttributes"), 3);
        assert!(client.get_queue_attributes().queue_url(&url).send().await.is_err());
        assert_eq!(counted("", "", "GetQueueAttributes"), 3, "outside a source's work: no source label");
        assert_eq!(counted("shop", "orders", "GetQueueAttributes"), 3);
    }
}
