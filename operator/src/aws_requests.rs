//! Every request the operator sends to AWS (queue checks, bucket checks, the scaler's
//! GetQueueAttributes, replays, assumed roles), counted by source, service, API and queue
//! (`sluice_operator_aws_requests_total`).
//!
//! Why a task-local source: the SQS and S3 clients are shared by every source on the same
//! endpoint, so the client cannot say whose request it sends; the task that works for a source
//! can. [`for_source`] names the source around that work, and the interceptor on every client
//! (`sluice_aws::requests`, once per attempt: a retry is billed, so it is counted) calls this
//! module's label step, which reads it.

use std::future::Future;
use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sluice_aws::requests::{CountRequests, CountedCredentials, Request};

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

fn count(request: &Request<'_>) {
    let (namespace, source) = SOURCE.try_with(Clone::clone).unwrap_or_default();
    let labels = RequestLabels {
        namespace,
        source,
        service: request.service.to_ascii_lowercase(),
        api: request.api.to_owned(),
        queue: request.queue.to_owned(),
    };
    REQUESTS.get_or_create(&labels).inc();
}

/// The interceptor to add to every SQS and S3 client the operator builds.
pub const COUNT_REQUESTS: CountRequests = CountRequests::new(count);

/// An assumed role's credentials, each AssumeRole counted for the source whose work asked.
pub fn counted_credentials<P>(provider: P) -> CountedCredentials<P> {
    CountedCredentials::new(provider, count)
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
