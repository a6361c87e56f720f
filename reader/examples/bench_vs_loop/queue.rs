//! The bench's queue chores: a fresh queue per run, filled before the consumer starts, counted
//! until empty, deleted afterwards. None of this is timed.

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use futures::stream::{self, StreamExt};

/// A LocalStack client with the test credentials; both consumers get theirs from the environment.
pub fn client(endpoint: &str) -> Client {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "bench"))
        .build();
    Client::from_conf(config)
}

pub async fn create(client: &Client, name: &str) -> Result<String, String> {
    let out = client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .send()
        .await
        .map_err(|e| format!("CreateQueue {name}: {e:?}"))?;
    out.queue_url.ok_or_else(|| "CreateQueue returned no URL".into())
}

/// `count` small JSON bodies (padded to `body_bytes` when that is larger), eight batches of ten on
/// the wire at a time.
pub async fn fill(client: &Client, url: &str, count: usize, body_bytes: usize) -> Result<(), String> {
    let starts: Vec<usize> = (0..count).step_by(10).collect();
    let results: Vec<Result<(), String>> = stream::iter(starts)
        .map(|start| async move {
            let entries = (start..(start + 10).min(count)).map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(body(i, body_bytes))
                    .build()
                    .map_err(|e| e.to_string())
            });
            let entries = entries.collect::<Result<Vec<_>, _>>()?;
            let out = client
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| format!("SendMessageBatch: {e:?}"))?;
            if out.failed.is_empty() { Ok(()) } else { Err(format!("send failed: {:?}", out.failed)) }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Visible + in flight, as SQS reports them.
pub async fn depth(client: &Client, url: &str) -> Result<u64, String> {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| format!("GetQueueAttributes: {e:?}"))?;
    let attrs = out.attributes.unwrap_or_default();
    Ok(attrs.values().filter_map(|v| v.parse::<u64>().ok()).sum())
}

/// Poll (every 5 ms, bounded) until the queue holds nothing: the end of the timed window, so the
/// interval is kept well below a run at 5 ms (under a second).
pub async fn wait_empty(client: &Client, url: &str, within: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if depth(client, url).await? == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("{url} not empty after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn delete(client: &Client, url: &str) {
    let _ = client.delete_queue().queue_url(url).send().await;
}

fn body(i: usize, bytes: usize) -> String {
    let small = format!("{{\"order\":{i},\"note\":\"benchmark message\"}}");
    let pad = bytes.saturating_sub(small.len() + 10);
    if pad == 0 {
        return small;
    }
    format!("{{\"order\":{i},\"note\":\"benchmark message\",\"pad\":\"{}\"}}", "x".repeat(pad))
}
