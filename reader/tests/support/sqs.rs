//! LocalStack access for the quick tests: per-test queues, sending, counting, over the harness's
//! endpoint and client (`sluice_tests::localstack`).

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};

use sluice_tests::localstack::{LocalStack, sqs_client};

pub struct Sqs {
    pub client: Client,
    pub endpoint: String,
}

impl Sqs {
    /// `None` (and a printed reason) when LocalStack does not answer: the test is skipped, except under
    /// CI (`CI` set) or the test command (`SLUICE_LOCALSTACK_ENDPOINT` set), where a missing LocalStack
    /// is a failure, never a silent pass.
    pub async fn connect() -> Option<Self> {
        let endpoint = LocalStack::endpoint();
        let client = sqs_client(&endpoint);
        match tokio::time::timeout(Duration::from_secs(5), client.list_queues().send()).await {
            Ok(Ok(_)) => Some(Self { client, endpoint }),
            other => {
                if std::env::var_os("CI").is_some()
                    || std::env::var_os("SLUICE_LOCALSTACK_ENDPOINT").is_some()
                {
                    panic!(
                        "LocalStack is not reachable at {endpoint} ({other:?}); start it with tests/scripts/localstack.sh start"
                    );
                }
                println!(
                    "SKIPPED: LocalStack is not reachable at {endpoint} ({other:?}); start it with tests/scripts/localstack.sh start"
                );
                None
            }
        }
    }

    /// A fresh queue named after the test.
    pub async fn queue(&self, prefix: &str, fifo: bool, visibility_seconds: u32) -> String {
        let mut name = format!("{prefix}-{}", fastrand::u64(..));
        let mut call = self
            .client
            .create_queue()
            .attributes(QueueAttributeName::VisibilityTimeout, visibility_seconds.to_string());
        if fifo {
            name.push_str(".fifo");
            call = call.attributes(QueueAttributeName::FifoQueue, "true");
        }
        call.queue_name(name).send().await.unwrap().queue_url.unwrap()
    }

    /// Send bodies (with an optional FIFO group each), ten a call.
    pub async fn send(&self, url: &str, messages: &[(String, Option<String>)]) {
        for (c, chunk) in messages.chunks(10).enumerate() {
            let entries = chunk.iter().enumerate().map(|(i, (body, group))| {
                let mut e = SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(body)
                    .message_attributes(
                        "origin",
                        MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value("test")
                            .build()
                            .unwrap(),
                    );
                if let Some(g) = group {
                    e = e.message_group_id(g).message_deduplication_id(format!("{c}-{i}-{body}"));
                }
                e.build().unwrap()
            });
            let out = self
                .client
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries.collect()))
                .send()
                .await
                .unwrap();
            assert!(out.failed.is_empty(), "send failed: {:?}", out.failed);
        }
    }

    /// (visible, in flight) as SQS reports them.
    pub async fn counts(&self, url: &str) -> (u64, u64) {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attrs = out.attributes.unwrap_or_default();
        let get = |n: QueueAttributeName| attrs.get(&n).and_then(|v| v.parse().ok()).unwrap_or(0);
        (
            get(QueueAttributeName::ApproximateNumberOfMessages),
            get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// Wait (bounded) until the counts are `want`.
    pub async fn wait_counts(&self, url: &str, want: (u64, u64), within: Duration) -> (u64, u64) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let counts = self.counts(url).await;
            if counts == want || tokio::time::Instant::now() >= deadline {
                return counts;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Receive (and delete) everything visible, with message attributes.
    pub async fn drain(&self, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        for _ in 0..50 {
            let out = self
                .client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .unwrap();
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for m in &messages {
                self.client
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
            all.extend(messages);
        }
        all
    }
}
