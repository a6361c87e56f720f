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
use futures::stream::{self, StreamExt};

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

impl QueueOptions {
    /// Only `VisibilityTimeout`, in seconds.
    pub fn visibility(seconds: u32) -> Self {
        Self { visibility_timeout: Some(seconds), ..Self::default() }
    }
}

/// One message for [`TestQueue::send_messages`]: a body as given, its group on a FIFO queue, and
/// its attributes.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    body: String,
    group: Option<String>,
    attributes: Vec<(String, MessageAttributeValue)>,
}

impl Outgoing {
    /// A message with `body` and no attributes.
    pub fn new(body: impl Into<String>) -> Self {
        Self { body: body.into(), ..Self::default() }
    }

    /// The FIFO message group.
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// A String attribute.
    pub fn attribute(self, name: &str, value: &str) -> Self {
        self.typed_attribute(name, "String", value)
    }

    /// An attribute of any type.
    pub fn attribute_value(mut self, name: &str, value: MessageAttributeValue) -> Self {
        self.attributes.push((name.to_owned(), value));
        self
    }

    fn typed_attribute(self, name: &str, data_type: &str, value: &str) -> Self {
        let value = MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .expect("data type and value are set");
        self.attribute_value(name, value)
    }
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

    /// (visible, in flight).
    pub fn pair(&self) -> (u64, u64) {
        (self.visible, self.in_flight)
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
    /// Next FIFO deduplication number of this handle.
    next_dedup: AtomicU64,
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
        Self {
            client: client.clone(),
            name,
            url: url.to_owned(),
            fifo,
            next_seq: AtomicU64::new(0),
            run,
            next_dedup: AtomicU64::new(0),
        }
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
    /// `g{seq % groups}`. One call at a time, in order.
    pub async fn send_batch_with(&self, n: usize, options: SendOptions) -> Result<Vec<u64>> {
        let groups = u64::from(options.groups.unwrap_or(1).max(1));
        let first = self.next_seq.fetch_add(n as u64, Ordering::SeqCst);
        let seqs: Vec<u64> = (first..first + n as u64).collect();
        let messages = seqs.iter().map(|&seq| {
            let body = options.pad_to.map_or_else(|| body_for(seq), |len| padded_body(seq, len));
            Outgoing::new(body).in_group(format!("g{}", seq % groups)).typed_attribute(
                "seq",
                "Number",
                &seq.to_string(),
            )
        });
        self.send_messages(messages, 1).await?;
        Ok(seqs)
    }

    /// Sends `(kind, body)` messages, each with a String attribute `kind` (what attribute routes
    /// and filters select on).
    pub async fn send_kinds(&self, messages: &[(&str, String)]) -> Result<()> {
        let outgoing =
            messages.iter().map(|(kind, body)| Outgoing::new(body.as_str()).attribute("kind", kind));
        self.send_messages(outgoing, 4).await.map(drop)
    }

    /// Sends `messages` as given, ten a call and up to `in_flight` calls at once (one on a FIFO
    /// queue, so that each group keeps its order); answers the MessageIds SQS assigned, in order.
    /// On a FIFO queue every message gets a deduplication id unique to this handle.
    pub async fn send_messages(
        &self,
        messages: impl IntoIterator<Item = Outgoing>,
        in_flight: usize,
    ) -> Result<Vec<String>> {
        let messages: Vec<Outgoing> = messages.into_iter().collect();
        let chunks: Vec<Vec<Outgoing>> = messages.chunks(BATCH).map(<[Outgoing]>::to_vec).collect();
        let in_flight = if self.fifo { 1 } else { in_flight.max(1) };
        let sent: Vec<Result<Vec<String>>> =
            stream::iter(chunks).map(|chunk| self.send_chunk(chunk)).buffered(in_flight).collect().await;
        Ok(sent.into_iter().collect::<Result<Vec<_>>>()?.into_iter().flatten().collect())
    }

    async fn send_chunk(&self, chunk: Vec<Outgoing>) -> Result<Vec<String>> {
        let mut request = self.client.send_message_batch().queue_url(&self.url);
        for (i, message) in chunk.iter().enumerate() {
            let mut entry =
                SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(&message.body);
            for (name, value) in &message.attributes {
                entry = entry.message_attributes(name, value.clone());
            }
            if self.fifo {
                let dedup = self.next_dedup.fetch_add(1, Ordering::SeqCst);
                entry = entry
                    .message_group_id(message.group.as_deref().unwrap_or("g0"))
                    .message_deduplication_id(format!("{}-{dedup}", self.run));
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
        let mut ids: Vec<(usize, String)> = output
            .successful()
            .iter()
            .map(|ok| (ok.id().parse().unwrap_or(usize::MAX), ok.message_id().to_owned()))
            .collect();
        ids.sort();
        Ok(ids.into_iter().map(|(_, id)| id).collect())
    }

    /// Receives once (up to 10, long poll of `wait` rounded down to whole seconds), without deleting.
    pub async fn receive(&self, wait: Duration) -> Result<Vec<Message>> {
        self.receive_with(wait, None).await
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

    /// Receives once without hiding anything (visibility 0): what a last look finds, left in place.
    pub async fn peek(&self, wait: Duration) -> Result<Vec<Message>> {
        self.receive_with(wait, Some(0)).await
    }

    async fn receive_with(&self, wait: Duration, visibility: Option<i32>) -> Result<Vec<Message>> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(BATCH as i32)
            .wait_time_seconds(wait.as_secs().min(20) as i32)
            .set_visibility_timeout(visibility)
            .message_attribute_names("All")
            .send()
            .await
            .with_context(|| format!("ReceiveMessage from {}", self.url))?;
        Ok(output.messages().to_vec())
    }

    /// Receives (attributes included) and deletes until a one-second long poll comes back empty;
    /// returns the messages in order.
    pub async fn drain_messages(&self) -> Result<Vec<Message>> {
        let mut all = Vec::new();
        loop {
            let messages = self.receive(Duration::from_secs(1)).await?;
            if messages.is_empty() {
                return Ok(all);
            }
            self.delete_messages(&messages).await?;
            all.extend(messages);
        }
    }

    /// Receives and deletes until a one-second long poll comes back empty; returns the bodies in order.
    pub async fn drain_bodies(&self) -> Result<Vec<String>> {
        let messages = self.drain_messages().await?;
        Ok(messages.iter().map(|m| m.body().unwrap_or_default().to_owned()).collect())
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

    /// Reads the depth figures every `every` until `done` holds for them or `within` has passed;
    /// answers the last figures read (the caller asserts on them).
    pub async fn wait_counts(
        &self,
        within: Duration,
        every: Duration,
        done: impl Fn(&QueueCounts) -> bool,
    ) -> Result<QueueCounts> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let counts = self.approximate_counts().await?;
            if done(&counts) || tokio::time::Instant::now() >= deadline {
                return Ok(counts);
            }
            tokio::time::sleep(every).await;
        }
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
