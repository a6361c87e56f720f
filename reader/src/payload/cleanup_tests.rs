//! Against LocalStack: of two deletes in one DeleteMessageBatch, the one SQS confirms takes its
//! object with it, the one SQS refuses leaves its object in place; and a delete S3 keeps failing
//! is given up after its retries and counted, without holding anything.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::config::Credentials;

use super::*;
use crate::aws::queue::Queue;
use crate::process::settled::Settled;
use crate::settle::acker::Acker;
use crate::settle::ledger::{DeletePolicy, Ledger, Receipt, Tag};

async fn localstack() -> (aws_config::SdkConfig, aws_sdk_s3::Client) {
    let endpoint =
        std::env::var("SLUICE_LOCALSTACK_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into());
    let aws = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "cleanup-tests"))
        .endpoint_url(endpoint)
        .load()
        .await;
    let s3 =
        aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&aws).force_path_style(true).build());
    (aws, s3)
}

#[tokio::test]
async fn a_delete_into_a_gone_bucket_is_given_up_and_counted() {
    let (_, s3) = localstack().await;
    let metrics = Arc::new(Metrics::new());
    let objects = ObjectCleanup::start(s3, metrics.clone());
    let gone = format!("gone-{:08x}", fastrand::u32(..));
    objects.remember(7, Pointer { bucket: gone, key: "k".into() });
    objects.deleted(&[7]);
    objects.close().await;
    let text = metrics.encode();
    assert!(text.contains("sluice_reader_payload_object_deletes_total{outcome=\"failed\"} 1"), "{text}");
    assert!(!text.contains("outcome=\"deleted\""), "{text}");
}

#[tokio::test]
async fn a_refused_message_delete_keeps_its_object() {
    let (aws, s3) = localstack().await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let name = format!("cleanup-{:08x}", fastrand::u32(..));
    s3.create_bucket().bucket(&name).send().await.expect("LocalStack S3 at SLUICE_LOCALSTACK_ENDPOINT");
    for key in ["confirmed", "refused"] {
        s3.put_object().bucket(&name).key(key).body(b"payload".to_vec().into()).send().await.unwrap();
    }
    let url = sqs.create_queue().queue_name(&name).send().await.unwrap().queue_url.unwrap();
    sqs.send_message().queue_url(&url).message_body("pointer").send().await.unwrap();
    let received = sqs.receive_message().queue_url(&url).wait_time_seconds(5).send().await.unwrap();
    let handle = received.messages()[0].receipt_handle().unwrap().to_owned();

    let queue = Queue {
        index: 0,
        url: url.as_str().into(),
        client: sqs.clone(),
        fifo: false,
        visibility: Duration::from_secs(30),
        receives: Default::default(),
    };
    let mut ledger = Ledger::new(DeletePolicy::OnAck);
    let vis = Duration::from_secs(30);
    let good = ledger.admit(0, "m1", handle.clone(), Tag::NONE, Instant::now(), vis).ticket;
    let bad = ledger.admit(0, "m2", "not-a-receipt-handle".into(), Tag::NONE, Instant::now(), vis).ticket;
    let metrics = Arc::new(Metrics::new());
    let objects = ObjectCleanup::start(s3.clone(), metrics.clone());
    objects.remember(good, Pointer { bucket: name.clone(), key: "confirmed".into() });
    objects.remember(bad, Pointer { bucket: name.clone(), key: "refused".into() });
    let acker = Acker::spawn(
        vec![Arc::new(queue)],
        Arc::new(Mutex::new(ledger)),
        metrics.clone(),
        Some(objects as Arc<dyn Settled>),
    );

    let batch = vec![
        (good, Receipt { queue: 0, handle }),
        (bad, Receipt { queue: 0, handle: "not-a-receipt-handle".into() }),
    ];
    assert_eq!(acker.delete_confirmed(batch).await, vec![good], "SQS confirms only the real receipt");
    acker.close().await; // waits for the queued object deletes
    let listing = s3.list_objects_v2().bucket(&name).send().await.unwrap();
    let left: Vec<&str> = listing.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(left, vec!["refused"]);
    let text = metrics.encode();
    assert!(text.contains("sluice_reader_payload_object_deletes_total{outcome=\"deleted\"} 1"), "{text}");
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
}
