//! The baseline: what a careful person writes by hand with the AWS SDK. `pollers` tasks, each
//! receive up to 10 (same long poll and attribute names as the reader), POST every message of the
//! batch at once as a CloudEvent (same headers as the reader's http sink), then one
//! DeleteMessageBatch for the ones the sink took; repeat. No retries, no heartbeat, no metrics.
//!
//! It runs as its own process (`bench_vs_loop baseline ...`) so that its CPU time is read from
//! /proc exactly like the reader's; it runs until the driver signals it.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use futures::future::join_all;

pub struct Loop {
    pub queue: String,
    pub endpoint: String,
    pub sink: String,
    pub pollers: usize,
    pub wait_seconds: i32,
}

impl Loop {
    pub async fn run(self) -> Result<(), String> {
        // The default credential chain and an endpoint override: how the reader builds its client.
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        let config = aws_sdk_sqs::config::Builder::from(&sdk).endpoint_url(&self.endpoint).build();
        let sqs = Client::from_conf(config);
        let http = reqwest::Client::new();
        let pollers = (0..self.pollers).map(|_| poll(&sqs, &http, &self));
        let ended = join_all(pollers).await;
        ended.into_iter().collect()
    }
}

async fn poll(sqs: &Client, http: &reqwest::Client, cfg: &Loop) -> Result<(), String> {
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&cfg.queue)
            .max_number_of_messages(10)
            .wait_time_seconds(cfg.wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await;
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                eprintln!("receive failed: {e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let posted = join_all(messages.iter().map(|m| post(http, cfg, m))).await;
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .zip(posted)
            .enumerate()
            .filter(|(_, (_, ok))| *ok)
            .filter_map(|(i, (m, _))| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle()?)
                    .build()
                    .ok()
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        if let Err(e) =
            sqs.delete_message_batch().queue_url(&cfg.queue).set_entries(Some(entries)).send().await
        {
            eprintln!("delete failed: {e:?}");
        }
    }
}

/// One binary-mode CloudEvent; true when the sink answered 2xx.
async fn post(http: &reqwest::Client, cfg: &Loop, m: &Message) -> bool {
    let request = http
        .post(&cfg.sink)
        .header("ce-specversion", "1.0")
        .header("ce-id", m.message_id().unwrap_or_default())
        .header("ce-source", &cfg.queue)
        .header("ce-type", "dev.sluice.sqs.message")
        .header("idempotency-key", m.message_id().unwrap_or_default())
        .timeout(std::time::Duration::from_secs(5))
        .body(m.body().unwrap_or_default().to_owned());
    match request.send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            // Read to the end, as the reader does, so the connection goes back to the pool.
            let _ = response.bytes().await;
            ok
        }
        Err(_) => false,
    }
}
