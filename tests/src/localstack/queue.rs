//! Per-test SQS queues with helpers to fill, drain and inspect them.
//!
//! Why: tests must not share queues (a leftover message from one test is a false failure in another), and
//! every suite needs the same few moves: send N numbered messages fast (batches of 10), count what comes
//! back, read SQS's own depth figures. Bodies carry a sequence number ([`body_for`] / [`seq_of`]) so a
//! test can tell lost messages from duplicates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

/// SQS's limit on entries per batch call.
const BATCH: usize = 10;
/// SQS's limit on queue name length, `.fifo` included.
const MAX_NAME: usize = 80;

/// The body of the message with sequence number `seq`: a small JSON object, so `json` payloads parse too.
pub fn body_for(seq: u64) -> String {
    format!(r#"{{"seq":{seq}}}"#)
}

/// The sequence number in a body made by [`body_for`].
pub fn seq_of(body: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(body).ok()?["seq"].as_u64()
}

/// Queue attributes a test may set at creation.
#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    /// `VisibilityTimeout` in seconds (SQS default 30).
    pub visibility_timeout: Option<u32>,
    /// Dead-letter redrive for messages received too often.
    pub redrive: Option<Redrive>,
    /// FIFO only: `ContentBasedDeduplication`.
    pub content_based_deduplication: bool,
}

/// A `RedrivePolicy`: after `max_receive_count` receives a message moves to `dead_letter_arn`.
#[derive(Debug, Clone)]
pub struct Redrive {
    /// ARN of the dead-letter queue, e.g. from [`TestQueue::arn`].
    pub dead_letter_arn: String,
    /// Receives before the move (1-1000).
    pub max_receive_count: u32,
}

/// How [`TestQueue::send_batch_with`] shapes messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendOptions {
    /// FIFO: spread messages round-robin over this many message groups (`g0`, `g1`, ...); default 1.
    pub groups: Option<u32>,
    /// Pad each body (still a [`seq_of`] body) to this many bytes.
    pub pad_to: Option<usize>,
}

/// [`body_for`] padded to `len` bytes with a `pad` field (unchanged if already that long).
pub fn padded_body(seq: u64, len: usize) -> String {
    let bare = format!(r#"{{"seq":{seq},"pad":""}}"#);
    let pad = "x".repeat(len.saturating_sub(bare.len()));
    format!(r#"{{"seq":{seq},"pad":"{pad}"}}"#)
}

/// SQS's approximate depth figures for one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounts {
    /// `ApproximateNumberOfMessages`: visible, waiting to be received.
    pub visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible`: received, not yet deleted.
    pub in_flight: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
}

impl QueueCounts {
    /// All three figures added up.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// A randomly named queue owned by one test. Delete it with [`TestQueue::delete`] when done.
#[derive(Debug)]
pub struct TestQueue {
    client: Client,
    /// Queue name (`PREFIX-RANDOM`, plus `.fifo` for FIFO queues).
    pub name: String,
    /// Queue URL as SQS returned it.
    pub url: String,
    /// Whether this is a FIFO queue.
    pub fifo: bool,
    /// Next sequence number [`TestQueue::send_batch`] will use; numbering continues across calls.
    next_seq: AtomicU64,
    /// Random per handle, so FIFO deduplication ids from two handles on one queue never collide.
    run: String,
}

impl TestQueue {
    /// Creates a queue named `PREFIX-RANDOM` with SQS's default attributes.
    pub async fn create(client: &Client, prefix: &str, fifo: bool) -> Result<Self> {
        Self::create_with(client, prefix, fifo, &QueueOptions::default()).await
    }

    /// Creates a queue named `PREFIX-RANDOM` with the given attributes.
    pub async fn create_with(
        client: &Client,
        prefix: &str,
        fifo: bool,
        options: &QueueOptions,
    ) -> Result<Self> {
        Self::create_named(client, &random_name(prefix, fifo), options).await
    }

    /// Creates (or, with identical attributes, reuses) the queue `name`; a name ending in `.fifo` makes a
    /// FIFO queue.
    pub async fn create_named(client: &Client, name: &str, options: &QueueOptions) -> Result<Self> {
        let fifo = name.ends_with(".fifo");
        let mut request = client.create_queue().queue_name(name);
        if fifo {
            request = request.attributes(QueueAttributeName::FifoQueue, "true");
            if options.content_based_deduplication {
                request = request.attributes(QueueAttributeName::ContentBasedDeduplication, "true");
            }
        }
        if let Some(seconds) = options.visibility_timeout {
            request = request.attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string());
        }
        if let Some(redrive) = &options.redrive {
            let policy = serde_json::json!({
                "deadLetterTargetArn": redrive.dead_letter_arn,
                "maxReceiveCount": redrive.max_receive_count,
            });
            request = request.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
        }
        let output = request.send().await.with_context(|| format!("CreateQueue {name}"))?;
        let url = output.queue_url().context("CreateQueue returned no QueueUrl")?;
        Ok(Self::open(client, url))
    }

    /// A handle on an existing queue, by URL (nothing is checked until the first call).
    pub fn open(client: &Client, url: &str) -> Self {
        let name = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_owned();
        let fifo = name.ends_with(".fifo");
        let run = std::iter::repeat_with(fastrand::alphanumeric).take(8).collect();
        Self { client: client.clone(), name, url: url.to_owned(), fifo, next_seq: AtomicU64::new(0), run }
    }

    /// The client this queue was created with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The queue's ARN (for a [`Redrive`] pointing at it).
    pub async fn arn(&self) -> Result<String> {
        let attributes = self.attributes(QueueAttributeName::QueueArn).await?;
        attributes
            .get(&QueueAttributeName::QueueArn)
            .cloned()
            .context("GetQueueAttributes returned no QueueArn")
    }

    /// Sends `n` messages numbered from where the last call stopped; returns their sequence numbers.
    pub async fn send_batch(&self, n: usize) -> Result<Vec<u64>> {
        self.send_batch_with(n, SendOptions::default()).await
    }

    /// Like [`TestQueue::send_batch`], with FIFO message groups spread as `options` says.
    ///
    /// Each message has body [`body_for`]`(seq)` and a `seq` Number attribute; on a FIFO queue, group
    /// `g{seq % groups}` and a deduplication id unique to this handle and `seq`.
    pub async fn send_batch_with(&self, n: usize, options: SendOptions) -> Result<Vec<u64>> {
        let groups = u64::from(options.groups.unwrap_or(1).max(1));
        let first = self.next_seq.fetch_add(n as u64, Ordering::SeqCst);
        let seqs: Vec<u64> = (first..first + n as u64).collect();
        for chunk in seqs.chunks(BATCH) {
            let mut request = self.client.send_message_batch().queue_url(&self.url);
            for (i, seq) in chunk.iter().enumerate() {
                let seq_attribute = MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(seq.to_string())
                    .build()?;
                let mut entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(options.pad_to.map_or_else(|| body_for(*seq), |len| padded_body(*seq, len)))
                    .message_attributes("seq", seq_attribute);
                if self.fifo {
                    entry = entry
                        .message_group_id(format!("g{}", seq % groups))
                        .message_deduplication_id(format!("{}-{seq}", self.run));
                }
                request = request.entries(entry.build()?);
            }
            let output = request.send().await.with_context(|| format!("SendMessageBatch to {}", self.url))?;
            if let Some(failed) = output.failed().first() {
                bail!(
                    "SendMessageBatch: {} of {} entries failed, first: {} {}",
                    output.failed().len(),
                    chunk.len(),
                    failed.code(),
                    failed.message().unwrap_or_default()
                );
            }
        }
        Ok(seqs)
    }

    /// Sends `(kind, body)` messages, in batches of 10, each with a String attribute `kind` (what
    /// attribute routes and filters select on).
    pub async fn send_kinds(&self, messages: &[(&str, String)]) -> Result<()> {
        for chunk in messages.chunks(BATCH) {
            let mut request = self.client.send_message_batch().queue_url(&self.url);
            for (i, (kind, body)) in chunk.iter().enumerate() {
                let kind =
                    MessageAttributeValue::builder().data_type("String").string_value(*kind).build()?;
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_attributes("kind", kind)
                    .build()?;
                request = request.entries(entry);
            }
            let sent = request.send().await.with_context(|| format!("SendMessageBatch to {}", self.url))?;
            if !sent.failed().is_empty() {
                bail!("SendMessageBatch: {} of {} entries failed", sent.failed().len(), chunk.len());
            }
        }
        Ok(())
    }

    /// Receives once (up to 10, long poll of `wait` rounded down to whole seconds), without deleting.
    pub async fn receive(&self, wait: Duration) -> Result<Vec<Message>> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(BATCH as i32)
            .wait_time_seconds(wait.as_secs().min(20) as i32)
            .message_attribute_names("All")
            .send()
            .await
            .with_context(|| format!("ReceiveMessage from {}", self.url))?;
        Ok(output.messages().to_vec())
    }

    /// Deletes received messages by receipt handle, in batches of 10.
    pub async fn delete_messages(&self, messages: &[Message]) -> Result<()> {
        for chunk in messages.chunks(BATCH) {
            let mut request = self.client.delete_message_batch().queue_url(&self.url);
            for (i, message) in chunk.iter().enumerate() {
                let handle = message.receipt_handle().context("received message has no receipt handle")?;
                request = request.entries(
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(handle)
                        .build()?,
                );
            }
            let output =
                request.send().await.with_context(|| format!("DeleteMessageBatch on {}", self.url))?;
            if let Some(failed) = output.failed().first() {
                bail!(
                    "DeleteMessageBatch: {} entries failed, first: {}",
                    output.failed().len(),
                    failed.code()
                );
            }
        }
        Ok(())
    }

    /// Receives and deletes until a one-second long poll comes back empty; returns the bodies in order.
    pub async fn drain_bodies(&self) -> Result<Vec<String>> {
        let mut bodies = Vec::new();
        loop {
            let messages = self.receive(Duration::from_secs(1)).await?;
            if messages.is_empty() {
                return Ok(bodies);
            }
            self.delete_messages(&messages).await?;
            bodies.extend(messages.iter().map(|m| m.body().unwrap_or_default().to_owned()));
        }
    }

    /// Receives and deletes everything visible; returns how many messages that was.
    pub async fn drain_count(&self) -> Result<usize> {
        Ok(self.drain_bodies().await?.len())
    }

    /// SQS's approximate visible / in-flight / delayed figures.
    pub async fn approximate_counts(&self) -> Result<QueueCounts> {
        let attributes = self.attributes(QueueAttributeName::All).await?;
        let figure = |name: QueueAttributeName| -> Result<u64> {
            let value =
                attributes.get(&name).with_context(|| format!("GetQueueAttributes returned no {name}"))?;
            value.parse().with_context(|| format!("{name} is not a number: {value:?}"))
        };
        Ok(QueueCounts {
            visible: figure(QueueAttributeName::ApproximateNumberOfMessages)?,
            in_flight: figure(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
            delayed: figure(QueueAttributeName::ApproximateNumberOfMessagesDelayed)?,
        })
    }

    /// Deletes the queue.
    pub async fn delete(self) -> Result<()> {
        self.client
            .delete_queue()
            .queue_url(&self.url)
            .send()
            .await
            .with_context(|| format!("DeleteQueue {}", self.url))?;
        Ok(())
    }

    async fn attributes(&self, name: QueueAttributeName) -> Result<HashMap<QueueAttributeName, String>> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(name)
            .send()
            .await
            .with_context(|| format!("GetQueueAttributes on {}", self.url))?;
        Ok(output.attributes().cloned().unwrap_or_default())
    }
}

/// `PREFIX-RANDOM`, cut to SQS's 80 characters and limited to the characters SQS allows.
fn random_name(prefix: &str, fifo: bool) -> String {
    let suffix = if fifo { ".fifo" } else { "" };
    let random: String = std::iter::repeat_with(fastrand::alphanumeric).take(12).collect();
    let clean: String = prefix
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .collect();
    let room = MAX_NAME - suffix.len() - random.len() - 1;
    let clean = &clean[..clean.len().min(room)];
    format!("{clean}-{random}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_their_sequence_number() {
        assert_eq!(seq_of(&body_for(42)), Some(42));
        assert_eq!(seq_of("not json"), None);
        assert_eq!(seq_of(r#"{"other":1}"#), None);
    }

    #[test]
    fn names_are_valid_sqs_names() {
        let long = "x".repeat(200);
        for (prefix, fifo) in [("reader smoke/1", false), (long.as_str(), true), ("", false)] {
            let name = random_name(prefix, fifo);
            assert!(name.len() <= MAX_NAME, "{name} is too long");
            assert_eq!(name.ends_with(".fifo"), fifo);
            let stem = name.trim_end_matches(".fifo");
            assert!(stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{name}");
        }
        assert_ne!(random_name("a", false), random_name("a", false));
    }

    #[tokio::test]
    async fn open_reads_name_and_kind_from_the_url() {
        let client = crate::localstack::sqs_client("http://127.0.0.1:9");
        let queue =
            TestQueue::open(&client, "http://127.0.0.1:4566/queue/us-east-1/000000000000/orders.fifo");
        assert_eq!(queue.name, "orders.fifo");
        assert!(queue.fifo);
        assert!(!TestQueue::open(&client, "http://127.0.0.1:4566/000000000000/plain").fifo);
    }
}
