//! Smoke test of the LocalStack fixture: the whole send / receive / delete path through real SQS calls.
//!
//! Why: every other integration suite stands on this fixture; when it breaks, this test names the cause
//! (LocalStack down, pins drifted, SDK protocol mismatch) before the suites fail in confusing ways.

use std::collections::BTreeSet;
use std::time::Duration;

use sluice_tests::localstack::{LocalStack, QueueCounts, SendOptions, TestQueue, seq_of, sqs_client};

/// Covers a cold install and start (about a minute) plus the exchange itself.
const BOUND: Duration = Duration::from_secs(300);

#[tokio::test]
async fn hundred_messages_go_round_trip_and_leave_the_queue_empty() {
    tokio::time::timeout(BOUND, async {
        let endpoint = LocalStack::ensure().await.expect("LocalStack is up");
        let client = sqs_client(&endpoint);
        let queue = TestQueue::create(&client, "smoke", false).await.expect("queue created");

        let sent = queue.send_batch(100).await.expect("sent");
        assert_eq!(sent.len(), 100);

        let bodies = queue.drain_bodies().await.expect("drained");
        let received: BTreeSet<u64> = bodies.iter().map(|b| seq_of(b).expect("numbered body")).collect();
        assert_eq!(bodies.len(), 100, "each message received once");
        assert_eq!(received, sent.into_iter().collect::<BTreeSet<_>>(), "every sent message came back");

        assert_eq!(queue.approximate_counts().await.expect("counts"), QueueCounts::default(), "queue empty");
        queue.delete().await.expect("queue deleted");
    })
    .await
    .expect("smoke test finished within its bound");
}

#[tokio::test]
async fn fifo_groups_keep_order_within_each_group() {
    tokio::time::timeout(BOUND, async {
        let endpoint = LocalStack::ensure().await.expect("LocalStack is up");
        let client = sqs_client(&endpoint);
        let queue = TestQueue::create(&client, "smoke", true).await.expect("FIFO queue created");

        queue
            .send_batch_with(30, SendOptions { groups: Some(3), ..SendOptions::default() })
            .await
            .expect("sent");
        let seqs: Vec<u64> = queue
            .drain_bodies()
            .await
            .expect("drained")
            .iter()
            .map(|b| seq_of(b).expect("numbered"))
            .collect();
        assert_eq!(seqs.len(), 30);
        for group in 0..3 {
            let in_group: Vec<u64> = seqs.iter().copied().filter(|s| s % 3 == group).collect();
            assert!(in_group.is_sorted(), "group g{group} out of order: {in_group:?}");
            assert_eq!(in_group.len(), 10);
        }
        queue.delete().await.expect("queue deleted");
    })
    .await
    .expect("FIFO smoke test finished within its bound");
}
