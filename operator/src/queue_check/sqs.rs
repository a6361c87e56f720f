//! The AWS side of the queue check: `GetQueueAttributes` (and `GetQueueUrl` for queues given by
//! name), with one SQS client per endpoint and region.
//!
//! Why a client cache: building a client resolves credentials and opens a connection pool;
//! sources that share an endpoint (every LocalStack source, every source of one region) share one.
//! Every call is bounded by a timeout so a black-holed endpoint delays only its own source.
//! An inspector calls AWS with the identity of its base configuration: the operator's own (IRSA
//! or Pod Identity of the operator pod), or a role a source names (`crate::identity`), never the
//! readers' credentials, which it never reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Region;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;
use futures::FutureExt;
use futures::future::BoxFuture;
use sluice_aws::{AwsFault, FaultClass, describe_call};
use sluice_crds::QueueRef;

use super::s3::Buckets;
use super::targets::{Target, TargetInspector, TargetKind};
use super::{QueueAttributes, QueueError, QueueInspector};

/// Upper bound on one AWS call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

type ClientKey = (Option<String>, Option<String>);

/// Inspects queues with the AWS SDK.
#[derive(Clone)]
pub struct SqsInspector {
    base: aws_config::SdkConfig,
    clients: Arc<Mutex<HashMap<ClientKey, Client>>>,
    buckets: Buckets,
}

impl SqsInspector {
    /// `base` is the operator's AWS configuration (the default chain).
    pub fn new(base: aws_config::SdkConfig) -> Self {
        Self { buckets: Buckets::new(base.clone()), base, clients: Arc::default() }
    }

    /// The AWS configuration the clients are built from (the identity they sign with).
    pub fn base(&self) -> &aws_config::SdkConfig {
        &self.base
    }

    /// The cached client for an endpoint override and a region.
    pub fn client(&self, endpoint: Option<&str>, region: Option<&str>) -> Client {
        let key = (endpoint.map(str::to_owned), region.map(str::to_owned));
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        clients
            .entry(key)
            .or_insert_with(|| {
                let mut config = aws_sdk_sqs::config::Builder::from(&self.base);
                if let Some(endpoint) = endpoint {
                    config = config.endpoint_url(endpoint);
                }
                if let Some(region) = region {
                    config = config.region(Region::new(region.to_owned()));
                }
                Client::from_conf(config.interceptor(crate::aws_requests::COUNT_REQUESTS).build())
            })
            .clone()
    }

    async fn inspect_queue(&self, queue: &QueueRef) -> Result<QueueAttributes, QueueError> {
        let region = queue.region.clone().or_else(|| queue.url.as_deref().and_then(region_of_url));
        let client = self.client(queue.endpoint.as_deref(), region.as_deref());
        let url = match (&queue.url, &queue.name) {
            (Some(url), _) => url.clone(),
            (None, Some(name)) => {
                let call = client.get_queue_url().queue_name(name).send();
                let out = bounded(call).await?.map_err(|e| classify("GetQueueUrl", &e))?;
                out.queue_url()
                    .map(str::to_owned)
                    .ok_or_else(|| QueueError::Unavailable("GetQueueUrl returned no url".into()))?
            }
            (None, None) => return Err(QueueError::Unavailable("no url or name".into())),
        };
        let call =
            client.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send();
        let out = bounded(call).await?.map_err(|e| classify("GetQueueAttributes", &e))?;
        let empty = HashMap::new();
        Ok(parse_attributes(url, out.attributes().unwrap_or(&empty)))
    }
}

impl TargetInspector for SqsInspector {
    fn check<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), QueueError>> {
        async move {
            match target.kind {
                TargetKind::Bucket => self.buckets.head(target).await,
                TargetKind::Queue => {
                    let client = self.client(target.endpoint.as_deref(), target.region.as_deref());
                    let call = client
                        .get_queue_attributes()
                        .queue_url(&target.name)
                        .attribute_names(QueueAttributeName::QueueArn)
                        .send();
                    bounded(call).await?.map(|_| ()).map_err(|e| classify("GetQueueAttributes", &e))
                }
            }
        }
        .boxed()
    }
}

impl QueueInspector for SqsInspector {
    fn inspect<'a>(&'a self, queue: &'a QueueRef) -> BoxFuture<'a, Result<QueueAttributes, QueueError>> {
        self.inspect_queue(queue).boxed()
    }
}

pub(super) async fn bounded<T>(call: impl Future<Output = T>) -> Result<T, QueueError> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| QueueError::Unavailable(format!("no answer within {} s", CALL_TIMEOUT.as_secs())))
}

/// Sorts an SDK error into "not there", "not allowed" and "try again" (`sluice_aws::fault`, the
/// classes the readers use too), with one line of text.
pub fn classify<E>(operation: &str, e: &SdkError<E, HttpResponse>) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let fault = AwsFault::of(e);
    match fault.class {
        FaultClass::Missing => QueueError::DoesNotExist,
        FaultClass::Denied => QueueError::Denied(describe_call(operation, e)),
        FaultClass::Transient | FaultClass::Other => QueueError::Unavailable(describe_call(operation, e)),
    }
}

/// Reads the attributes the checks need; missing or malformed numbers count as 0.
pub fn parse_attributes(url: String, attributes: &HashMap<QueueAttributeName, String>) -> QueueAttributes {
    let number =
        |name: QueueAttributeName| attributes.get(&name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    QueueAttributes {
        fifo: attributes.get(&QueueAttributeName::FifoQueue).is_some_and(|v| v.eq_ignore_ascii_case("true")),
        visibility_timeout_seconds: number(QueueAttributeName::VisibilityTimeout),
        redrive_policy: attributes.get(&QueueAttributeName::RedrivePolicy).filter(|v| !v.is_empty()).cloned(),
        maximum_message_size: number(QueueAttributeName::MaximumMessageSize),
        visible: number(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: number(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: number(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        kms_master_key_id: attributes
            .get(&QueueAttributeName::KmsMasterKeyId)
            .filter(|v| !v.is_empty())
            .cloned(),
        url,
    }
}

/// The region in an SQS URL: `sqs.REGION.amazonaws.com` hosts, or LocalStack's
/// `/queue/REGION/ACCOUNT/NAME` paths.
pub fn region_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let aws_region = host
        .strip_prefix("sqs.")
        .and_then(|h| h.strip_suffix(".amazonaws.com").or_else(|| h.strip_suffix(".amazonaws.com.cn")));
    if let Some(region) = aws_region
        && !region.is_empty()
        && !region.contains('.')
    {
        return Some(region.to_owned());
    }
    let mut segments = path.split('/');
    if segments.next() == Some("queue")
        && let Some(region) = segments.next()
        && region.contains('-')
    {
        return Some(region.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_from_aws_and_localstack_urls() {
        let cases = [
            ("https://sqs.eu-west-1.amazonaws.com/123/orders", Some("eu-west-1")),
            ("http://127.0.0.1:4566/queue/us-east-2/000000000000/q", Some("us-east-2")),
            ("http://127.0.0.1:4566/000000000000/q", None),
            ("https://sqs.amazonaws.com.evil/1/q", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(region_of_url(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn attributes_are_parsed_leniently() {
        let attrs = HashMap::from([
            (QueueAttributeName::FifoQueue, "true".to_owned()),
            (QueueAttributeName::VisibilityTimeout, "45".to_owned()),
            (QueueAttributeName::ApproximateNumberOfMessages, "12".to_owned()),
            (QueueAttributeName::ApproximateNumberOfMessagesNotVisible, "x".to_owned()),
            (QueueAttributeName::RedrivePolicy, String::new()),
            (QueueAttributeName::MaximumMessageSize, "1048576".to_owned()),
        ]);
        let parsed = parse_attributes("u".into(), &attrs);
        assert!(parsed.fifo);
        assert_eq!(parsed.visibility_timeout_seconds, 45);
        assert_eq!(parsed.visible, 12);
        assert_eq!(parsed.in_flight, 0);
        assert_eq!(parsed.redrive_policy, None);
        assert_eq!(parsed.maximum_message_size, 1_048_576);
    }
}
