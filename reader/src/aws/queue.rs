//! The queues this reader consumes, reached and checked before anything is received.
//!
//! Why check at start: a wrong URL or missing permissions would otherwise show up as a poller
//! retrying forever. GetQueueAttributes with a short timeout turns them into a configuration error
//! naming the field (exit 2), and tells us the queue's own visibility timeout, which the heartbeat
//! needs when the spec does not set one, and its redrive policy, which is logged (`redrive`). An
//! endpoint that does not answer, or throttles, is an outage, not a mistake: it is answered as
//! [`Error::Outage`], which the start retries with backoff.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::aws::receive_tally::ReceiveTally;
use crate::aws::{SqsClients, describe, error_type};
use crate::config::settings::{QueueLocation, QueueSettings, Settings};
use crate::process::error::{Error, Result};
use sluice_aws::{AwsFault, FaultClass};

pub struct Queue {
    pub index: usize,
    pub url: Arc<str>,
    pub client: aws_sdk_sqs::Client,
    pub fifo: bool,
    /// The visibility timeout messages are received with (spec, else the queue's own).
    pub visibility: Duration,
    /// What its receives brought lately (the poller count adapts to it).
    pub receives: ReceiveTally,
}

/// Reach every queue in the spec; the first that fails ends this attempt with a config error
/// (SQS answered: fix the spec) or an outage (no answer: try again).
pub async fn connect(
    settings: &Settings,
    clients: &mut SqsClients,
    timeout: Duration,
) -> Result<Vec<Arc<Queue>>> {
    let mut queues = Vec::with_capacity(settings.queues.len());
    for q in &settings.queues {
        let client = clients.client(q.endpoint.as_deref(), q.region.as_deref());
        let url = resolve_url(q, &client, timeout).await?;
        let attributes = tokio::time::timeout(
            timeout,
            client
                .get_queue_attributes()
                .queue_url(&url)
                .attribute_names(QueueAttributeName::VisibilityTimeout)
                .attribute_names(QueueAttributeName::RedrivePolicy)
                .send(),
        )
        .await
        .map_err(|_| unreachable(q, format!("no answer from SQS within {timeout:?}")))?
        .map_err(|e| failed(q, format!("GetQueueAttributes on {url}"), &e))?;
        let queue_default = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(30);
        let seconds = settings.receive.visibility_timeout_seconds.map_or(queue_default, |s| s as u64);
        let redrive = attributes.attributes().and_then(|a| a.get(&QueueAttributeName::RedrivePolicy));
        super::redrive::log(&url, redrive.map(String::as_str));
        queues.push(Arc::new(Queue {
            index: q.index,
            url: Arc::from(url.as_str()),
            client,
            fifo: q.fifo,
            visibility: Duration::from_secs(seconds),
            receives: ReceiveTally::default(),
        }));
    }
    Ok(queues)
}

async fn resolve_url(q: &QueueSettings, client: &aws_sdk_sqs::Client, timeout: Duration) -> Result<String> {
    match &q.location {
        QueueLocation::Url(u) => Ok(u.url.clone()),
        QueueLocation::Name(name) => {
            let answer = tokio::time::timeout(timeout, client.get_queue_url().queue_name(name).send())
                .await
                .map_err(|_| unreachable(q, format!("no answer from SQS within {timeout:?}")))?
                .map_err(|e| failed(q, format!("GetQueueUrl for {name:?}"), &e))?;
            answer
                .queue_url()
                .map(str::to_owned)
                .ok_or_else(|| wrong_queue(q, "GetQueueUrl returned no URL".into()))
        }
    }
}

/// The endpoint (or the URL's host) cannot be reached: name the field that chose it.
/// A failed call on the queue: an outage when it is worth trying again (timeouts, refused
/// connections, throttles), else the queue's configuration.
fn failed<E>(q: &QueueSettings, call: String, e: &SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("{call} failed ({}): {}", error_type(e), describe(e));
    match AwsFault::of(e).class {
        FaultClass::Transient => unreachable(q, message),
        FaultClass::Missing | FaultClass::Denied | FaultClass::Other => wrong_queue(q, message),
    }
}

fn unreachable(q: &QueueSettings, message: String) -> Error {
    let field = match (&q.endpoint, &q.location) {
        (Some(_), _) => format!("{}.endpoint", q.field()),
        (None, QueueLocation::Url(_)) => format!("{}.url", q.field()),
        (None, QueueLocation::Name(_)) => format!("{}.region", q.field()),
    };
    Error::Outage { field, message: format!("queue unreachable: {message}") }
}

/// SQS answered, but not for this queue (missing, no permission, bad name).
fn wrong_queue(q: &QueueSettings, message: String) -> Error {
    let field = match &q.location {
        QueueLocation::Url(_) => format!("{}.url", q.field()),
        QueueLocation::Name(_) => format!("{}.name", q.field()),
    };
    Error::config(field, message)
}
