//! Where the scaler learns a queue's depth: `GetQueueAttributes`, three counters, nothing else.
//!
//! Why a trait: the scaling loop is tested with a fake queue. Why its own implementation beside
//! `queue_check`: the scaler polls every few seconds, so it asks for the three counters only and
//! resolves a queue given by name once (cached), keeping to one AWS call per queue per interval
//! whatever the replica count. It shares `queue_check`'s SQS clients (one per endpoint and region)
//! for sources read with the operator's identity, and reads a source that names a role with that
//! role (`crate::identity`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;
use futures::FutureExt;
use futures::future::{BoxFuture, try_join_all};
use sluice_crds::{Credentials, QueueFigures, QueueRef};

use crate::identity::Identities;
use crate::queue_check::queue_label;
use crate::queue_check::sqs::{SqsInspector, region_of_url};

/// Upper bound on one AWS call, so a black-holed endpoint delays only its own source.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("queue {queue}: {message}")]
pub struct AttributesError {
    /// How the spec names the queue.
    pub queue: String,
    pub message: String,
}

impl AttributesError {
    fn new(queue: &QueueRef, message: impl Into<String>) -> Self {
        Self { queue: queue_label(queue), message: message.into() }
    }
}

/// Reads the depth figures of one queue, as the identity `credentials` describe.
pub trait QueueAttributes: Send + Sync {
    fn figures<'a>(
        &'a self,
        queue: &'a QueueRef,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<QueueFigures, AttributesError>>;
}

/// The figures of all of a source's queues, summed; all queues are asked at once. One failure fails
/// the whole: a decision on some of the queues could scale a busy source down.
pub async fn source_figures(
    attributes: &dyn QueueAttributes,
    queues: &[QueueRef],
    credentials: &Credentials,
) -> Result<QueueFigures, AttributesError> {
    let each = try_join_all(queues.iter().map(|q| attributes.figures(q, credentials))).await?;
    Ok(each.iter().fold(QueueFigures::default(), |sum, f| QueueFigures {
        visible: sum.visible.saturating_add(f.visible),
        in_flight: sum.in_flight.saturating_add(f.in_flight),
        delayed: sum.delayed.saturating_add(f.delayed),
        observed_at: None,
    }))
}

/// The counters as SQS returns them; a missing or malformed one is an error, not a zero, since a
/// zero could scale a busy source to nothing.
pub fn parse_figures(
    queue: &QueueRef,
    attributes: &HashMap<QueueAttributeName, String>,
) -> Result<QueueFigures, AttributesError> {
    let number = |name: QueueAttributeName| {
        let raw = attributes.get(&name).ok_or_else(|| {
            AttributesError::new(queue, format!("{} missing from the answer", name.as_str()))
        })?;
        raw.parse::<i64>()
            .map_err(|_| AttributesError::new(queue, format!("{} is {raw:?}, not a number", name.as_str())))
    };
    Ok(QueueFigures {
        visible: number(QueueAttributeName::ApproximateNumberOfMessages)?,
        in_flight: number(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
        delayed: number(QueueAttributeName::ApproximateNumberOfMessagesDelayed)?,
        observed_at: None,
    })
}

/// (endpoint override, region, queue name): a queue given by name is unique within these.
type NameKey = (Option<String>, Option<String>, String);

/// `QueueAttributes` over the AWS SDK, with the source's role where it names one, else the
/// operator's own identity.
#[derive(Clone)]
pub struct SqsQueueAttributes {
    identities: Identities,
    /// Queue URLs resolved from (endpoint, region, name).
    urls: Arc<Mutex<HashMap<NameKey, String>>>,
}

impl SqsQueueAttributes {
    /// Shares `clients`' SQS client cache for the operator's own identity, and assumes roles
    /// from it.
    pub fn new(clients: SqsInspector) -> Self {
        Self::with_identities(Identities::new(clients))
    }

    /// Shares `identities` (and so each assumed role's cached credentials) with the reconciler.
    pub fn with_identities(identities: Identities) -> Self {
        Self { identities, urls: Arc::default() }
    }

    /// The identities this reader of attributes holds (for tests and metrics).
    pub fn identities(&self) -> &Identities {
        &self.identities
    }

    async fn queue_figures(
        &self,
        queue: &QueueRef,
        credentials: &Credentials,
    ) -> Result<QueueFigures, AttributesError> {
        let region = queue.region.clone().or_else(|| queue.url.as_deref().and_then(region_of_url));
        let clients = self.identities.for_source(credentials).await;
        let client = clients.client(queue.endpoint.as_deref(), region.as_deref());
        let url = match (&queue.url, &queue.name) {
            (Some(url), _) => url.clone(),
            (None, Some(name)) => {
                let key = (queue.endpoint.clone(), region.clone(), name.clone());
                let cached = self.urls.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
                match cached {
                    Some(url) => url,
                    None => {
                        let out = bounded(queue, client.get_queue_url().queue_name(name).send())
                            .await?
                            .map_err(|e| sdk_error(queue, "GetQueueUrl", &e))?;
                        let url = out
                            .queue_url()
                            .ok_or_else(|| AttributesError::new(queue, "GetQueueUrl returned no url"))?
                            .to_owned();
                        self.urls.lock().unwrap_or_else(PoisonError::into_inner).insert(key, url.clone());
                        url
                    }
                }
            }
            (None, None) => return Err(AttributesError::new(queue, "the spec gives neither url nor name")),
        };
        let call = client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send();
        let out = bounded(queue, call).await?.map_err(|e| sdk_error(queue, "GetQueueAttributes", &e))?;
        parse_figures(queue, out.attributes().unwrap_or(&HashMap::new()))
    }
}

impl QueueAttributes for SqsQueueAttributes {
    fn figures<'a>(
        &'a self,
        queue: &'a QueueRef,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<QueueFigures, AttributesError>> {
        self.queue_figures(queue, credentials).boxed()
    }
}

async fn bounded<T>(queue: &QueueRef, call: impl Future<Output = T>) -> Result<T, AttributesError> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| AttributesError::new(queue, format!("no answer from SQS within {CALL_TIMEOUT:?}")))
}

/// The call's failure in one line (the service's code and message, or what kept the request from
/// an answer): it goes to the WARN line, the `Fallback` condition and `status.fallback`.
fn sdk_error<E, R>(queue: &QueueRef, operation: &str, error: &SdkError<E, R>) -> AttributesError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    AttributesError::new(queue, sluice_aws::fault::describe_call(operation, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(url: &str) -> QueueRef {
        QueueRef { url: Some(url.into()), name: None, region: None, endpoint: None, weight: 1 }
    }

    /// Answers from a table; an unknown queue is an error.
    struct Fake(HashMap<String, QueueFigures>);

    impl QueueAttributes for Fake {
        fn figures<'a>(
            &'a self,
            queue: &'a QueueRef,
            _: &'a Credentials,
        ) -> BoxFuture<'a, Result<QueueFigures, AttributesError>> {
            let found = queue.url.as_ref().and_then(|u| self.0.get(u)).cloned();
            async move { found.ok_or_else(|| AttributesError::new(queue, "no such queue")) }.boxed()
        }
    }

    fn figures(visible: i64, in_flight: i64, delayed: i64) -> QueueFigures {
        QueueFigures { visible, in_flight, delayed, observed_at: None }
    }

    #[tokio::test]
    async fn a_source_sums_its_queues() {
        let fake = Fake(HashMap::from([("a".into(), figures(1, 2, 3)), ("b".into(), figures(10, 20, 30))]));
        let sum = source_figures(&fake, &[queue("a"), queue("b")], &Credentials::default()).await.unwrap();
        assert_eq!(sum, figures(11, 22, 33));
        let err =
            source_figures(&fake, &[queue("a"), queue("gone")], &Credentials::default()).await.unwrap_err();
        assert_eq!(err.to_string(), "queue gone: no such queue");
    }

    #[test]
    fn counters_are_parsed_strictly() {
        let q = queue("https://sqs.us-east-1.amazonaws.com/1/q");
        let mut answer = HashMap::from([
            (QueueAttributeName::ApproximateNumberOfMessages, "120".to_owned()),
            (QueueAttributeName::ApproximateNumberOfMessagesNotVisible, "7".to_owned()),
            (QueueAttributeName::ApproximateNumberOfMessagesDelayed, "0".to_owned()),
        ]);
        assert_eq!(parse_figures(&q, &answer).unwrap(), figures(120, 7, 0));
        answer.insert(QueueAttributeName::ApproximateNumberOfMessagesNotVisible, "many".into());
        let err = parse_figures(&q, &answer).unwrap_err();
        assert!(err.message.contains("ApproximateNumberOfMessagesNotVisible"), "{err}");
        answer.remove(&QueueAttributeName::ApproximateNumberOfMessages);
        let err = parse_figures(&q, &answer).unwrap_err();
        assert!(err.message.contains("ApproximateNumberOfMessages missing"), "{err}");
    }
}
