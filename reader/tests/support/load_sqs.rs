//! LocalStack for the load tests: a client that fails loudly, bulk sends that keep the ids, and
//! the "queue is really empty" check.
//!
//! Why not `support::sqs`: that one skips a test when LocalStack is down, which is right for
//! quick functional tests but would let a "none lost" claim pass by not running. These tests panic
//! instead and say how to start LocalStack. Sends run several batches at once so 10,000 messages
//! take seconds, and every MessageId SQS hands back is kept: "none lost" is checked against the
//! exact set of ids, not just a count.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use futures::stream::{self, StreamExt};
use sluice_tests::localstack::{LocalStack, sqs_client as client};

/// Batches of ten on the wire at once while filling a queue.
const SEND_CONCURRENCY: usize = 8;

#[derive(Clone)]
pub struct LoadSqs {
    pub client: Client,
    pub endpoint: String,
}

impl LoadSqs {
    /// Panics, saying how to start LocalStack, when it does not answer.
    pub async fn connect() -> Self {
        let endpoint = LocalStack::endpoint();
        let client = client(&endpoint);
        match tokio::time::timeout(Duration::from_secs(10), client.list_queues().send()).await {
            Ok(Ok(_)) => Self { client, endpoint },
            other => panic!(
                "LocalStack is not reachable at {endpoint} ({other:?}). Start it with \
                 `bash tests/scripts/localstack.sh start` (or point SLUICE_LOCALSTACK_ENDPOINT at one)"
            ),
        }
    }

    /// A fresh standard queue, deleted again when the returned guard drops (pass or fail).
    pub async fn queue(&self, prefix: &str, visibility_seconds: u32) -> QueueGuard {
        let name = format!("{prefix}-{}", fastrand::u64(..));
        let url = self
            .client
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::VisibilityTimeout, visibility_seconds.to_string())
            .send()
            .await
            .expect("CreateQueue")
            .queue_url
            .expect("a queue URL");
        QueueGuard { url, endpoint: self.endpoint.clone() }
    }

    /// Send `count` bodies `{prefix}-{i}`; returns the MessageIds SQS assigned.
    pub async fn fill(&self, url: &str, prefix: &str, count: usize) -> BTreeSet<String> {
        let chunks: Vec<Vec<usize>> =
            (0..count).collect::<Vec<_>>().chunks(10).map(<[usize]>::to_vec).collect();
        let sent: Vec<Vec<String>> = stream::iter(chunks)
            .map(|chunk| self.send_chunk(url, prefix, chunk))
            .buffer_unordered(SEND_CONCURRENCY)
            .collect()
            .await;
        let ids: BTreeSet<String> = sent.into_iter().flatten().collect();
        assert_eq!(ids.len(), count, "SQS assigned {} distinct ids to {count} messages", ids.len());
        ids
    }

    async fn send_chunk(&self, url: &str, prefix: &str, chunk: Vec<usize>) -> Vec<String> {
        let entries = chunk.iter().map(|i| {
            SendMessageBatchRequestEntry::builder()
                .id(format!("m{i}"))
                .message_body(format!("{prefix}-{i}"))
                .build()
                .expect("entry")
        });
        let out = self
            .client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries.collect()))
            .send()
            .await
            .expect("SendMessageBatch");
        assert!(out.failed.is_empty(), "send failed: {:?}", out.failed);
        out.successful.into_iter().map(|s| s.message_id).collect()
    }

    /// (ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible).
    pub async fn counts(&self, url: &str) -> (u64, u64) {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("GetQueueAttributes");
        let attrs = out.attributes.unwrap_or_default();
        let get = |n: QueueAttributeName| attrs.get(&n).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
        (
            get(QueueAttributeName::ApproximateNumberOfMessages),
            get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// Wait (bounded) for (0, 0); returns the last counts seen.
    pub async fn wait_empty(&self, url: &str, within: Duration) -> (u64, u64) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let counts = self.counts(url).await;
            if counts == (0, 0) || tokio::time::Instant::now() >= deadline {
                return counts;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// One last long-poll receive (visibility 0, so it hides nothing); the messages it got.
    pub async fn final_receive(&self, url: &str) -> usize {
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(2)
            .visibility_timeout(0)
            .send()
            .await
            .expect("ReceiveMessage");
        out.messages.unwrap_or_default().len()
    }
}

/// A test's queue; dropping it deletes the queue (from a thread of its own, so it also works while
/// a failed test unwinds).
pub struct QueueGuard {
    pub url: String,
    endpoint: String,
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        let (url, endpoint) = (self.url.clone(), self.endpoint.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let call = client(&endpoint).delete_queue().queue_url(url).send();
                let _ = tokio::time::timeout(Duration::from_secs(10), call).await;
            });
            Ok::<(), std::io::Error>(())
        });
        let _ = cleanup.join();
    }
}
