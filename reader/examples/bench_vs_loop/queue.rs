//! The bench's queue chores over the harness's queue helper (`sluice_tests::localstack`): a fresh
//! queue per run, filled before the consumer starts, counted until empty, deleted afterwards. None of
//! this is timed but [`wait_empty`], the end of the timed window.

use std::time::Duration;

use aws_sdk_sqs::Client;
use sluice_tests::localstack::{Outgoing, QueueOptions, TestQueue};

pub use sluice_tests::localstack::sqs_client as client;

/// Batches of ten on the wire at once while filling a queue.
const SEND_CONCURRENCY: usize = 8;

pub async fn create(client: &Client, name: &str) -> Result<String, String> {
    let queue = TestQueue::create_named(client, name, &QueueOptions::visibility(30))
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(queue.url)
}

/// `count` small JSON bodies (padded to `body_bytes` when that is larger), eight batches of ten on
/// the wire at a time.
pub async fn fill(client: &Client, url: &str, count: usize, body_bytes: usize) -> Result<(), String> {
    let messages = (0..count).map(|i| Outgoing::new(body(i, body_bytes)));
    TestQueue::open(client, url)
        .send_messages(messages, SEND_CONCURRENCY)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(())
}

/// Poll (every 5 ms, bounded) until the queue holds nothing visible or in flight: the end of the
/// timed window, so the interval is kept well below a run at 5 ms (under a second).
pub async fn wait_empty(client: &Client, url: &str, within: Duration) -> Result<(), String> {
    let counts = TestQueue::open(client, url)
        .wait_counts(within, Duration::from_millis(5), |c| c.visible + c.in_flight == 0)
        .await
        .map_err(|e| format!("{e:#}"))?;
    if counts.visible + counts.in_flight == 0 {
        Ok(())
    } else {
        Err(format!("{url} not empty after {within:?}"))
    }
}

pub async fn delete(client: &Client, url: &str) {
    let _ = TestQueue::open(client, url).delete().await;
}

fn body(i: usize, bytes: usize) -> String {
    let small = format!("{{\"order\":{i},\"note\":\"benchmark message\"}}");
    let pad = bytes.saturating_sub(small.len() + 10);
    if pad == 0 {
        return small;
    }
    format!("{{\"order\":{i},\"note\":\"benchmark message\",\"pad\":\"{}\"}}", "x".repeat(pad))
}
