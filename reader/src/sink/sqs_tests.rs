//! The sqs sink against LocalStack: batches arrive whole, FIFO targets keep groups and drop
//! redeliveries, a missing queue fails without retrying, dead letters carry their reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use sluice_crds::{RetrySpec, SqsSinkSpec};

use super::aws_testing::{localstack, unique};
use super::dead_letter::{DeadLetter, REASON, SOURCE_MESSAGE_ID, SOURCE_QUEUE};
use super::retry::RetryPolicy;
use super::sqs::SqsSink;
use super::testing::record;
use super::{EpochSupport, Outcome, Sink};
use crate::record::Record;

async fn queue(client: &Client, fifo: bool) -> String {
    let mut create = client.create_queue();
    if fifo {
        create = create
            .queue_name(format!("{}.fifo", unique("sluice-sink")))
            .attributes(QueueAttributeName::FifoQueue, "true");
    } else {
        create = create.queue_name(unique("sluice-sink"));
    }
    create.send().await.unwrap().queue_url().unwrap().to_owned()
}

fn sink(aws: &aws_config::SdkConfig, queue_url: &str) -> SqsSink {
    let spec = SqsSinkSpec {
        queue_url: queue_url.into(),
        endpoint: None,
        region: None,
        message_group_id: None,
        offload: None,
    };
    let retry = RetrySpec { max_attempts: 3, initial_delay_ms: 10, max_delay_ms: 50, ..RetrySpec::default() };
    SqsSink::new("forward", &spec, aws, &Arc::default(), RetryPolicy::from_spec(&retry)).unwrap()
}

type Received = (String, Option<String>, BTreeMap<String, String>);

/// Received (and deleted) messages as (body, group id, message attributes), until `want` arrived
/// or `patience` passed.
async fn drain(client: &Client, queue_url: &str, want: usize, patience: Duration) -> Vec<Received> {
    let mut got = Vec::new();
    let deadline = Instant::now() + patience;
    while got.len() < want && Instant::now() < deadline {
        let out = client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        for m in out.messages() {
            let group =
                m.attributes().and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId)).cloned();
            let attributes = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.clone(), v.string_value().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            got.push((m.body().unwrap_or_default().to_owned(), group, attributes));
            client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    got
}

const PATIENCE: Duration = Duration::from_secs(20);

fn records(n: usize, group: Option<&str>) -> Vec<Arc<Record>> {
    (0..n)
        .map(|i| {
            let mut r = record(&format!("src-{i:03}"));
            r.group_id = group.map(str::to_owned);
            r.message_attributes.insert("index".into(), i.to_string());
            Arc::new(r)
        })
        .collect()
}

#[tokio::test]
async fn forwards_to_a_standard_queue_in_batches() {
    let aws = localstack().await;
    let client = Client::new(&aws);
    let target = queue(&client, false).await;
    let sink = sink(&aws, &target);
    assert_eq!(sink.epoch_support(), EpochSupport::None);
    let outcomes = sink.deliver(&records(23, None)).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 23]);
    assert_eq!(sink.stats().unwrap().requests(), 3, "23 records are 3 SendMessageBatch calls");
    let mut got = drain(&client, &target, 23, PATIENCE).await;
    got.sort();
    assert_eq!(got.len(), 23);
    assert_eq!(got[7].0, "body-src-007");
    assert_eq!(got[7].2["index"], "7");
    client.delete_queue().queue_url(&target).send().await.unwrap();
}

#[tokio::test]
async fn a_fifo_target_keeps_groups_and_drops_redeliveries() {
    let aws = localstack().await;
    let client = Client::new(&aws);
    let target = queue(&client, true).await;
    let sink = sink(&aws, &target);
    assert_eq!(sink.epoch_support(), EpochSupport::Idempotent);
    let batch = records(12, Some("customer-7"));
    assert_eq!(sink.deliver(&batch).await, vec![Outcome::Delivered; 12]);
    // The same records again (a redelivery after a crash): SQS deduplicates on the MessageId.
    assert_eq!(sink.deliver(&batch).await, vec![Outcome::Delivered; 12]);
    let got = drain(&client, &target, 12, PATIENCE).await;
    assert_eq!(got.len(), 12);
    let again = drain(&client, &target, 1, Duration::from_secs(2)).await;
    assert_eq!(again.len(), 0, "each record once: {again:?}");
    let bodies: Vec<_> = got.iter().map(|g| g.0.as_str()).collect();
    let expected: Vec<_> = (0..12).map(|i| format!("body-src-{i:03}")).collect();
    assert_eq!(bodies, expected, "group order kept");
    assert!(got.iter().all(|g| g.1.as_deref() == Some("customer-7")));
    client.delete_queue().queue_url(&target).send().await.unwrap();
}

#[tokio::test]
async fn a_missing_queue_fails_without_retrying() {
    let aws = localstack().await;
    let missing = format!("{}/000000000000/{}", super::aws_testing::endpoint(), unique("absent"));
    let sink = sink(&aws, &missing);
    let outcomes = sink.deliver(&records(2, None)).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Failed { reason } if reason.contains("NonExistentQueue"))),
        "{outcomes:?}"
    );
    assert_eq!(sink.stats().unwrap().retries(), 0);
}

#[tokio::test]
async fn dead_letters_carry_the_reason_and_the_source() {
    let aws = localstack().await;
    let client = Client::new(&aws);
    let dlq = queue(&client, false).await;
    let dead_letter = DeadLetter::new(Arc::new(sink(&aws, &dlq)));
    let poison = records(1, None).remove(0);
    let rejected = vec![(poison.clone(), "HTTP 400 Bad Request from http://sink/: bad field".to_string())];
    assert_eq!(dead_letter.send(&rejected).await, vec![Outcome::Delivered]);
    let got = drain(&client, &dlq, 1, PATIENCE).await;
    let (body, _, attributes) = &got[0];
    assert_eq!(body, "body-src-000");
    assert_eq!(attributes[REASON], "HTTP 400 Bad Request from http://sink/: bad field");
    assert_eq!(attributes[SOURCE_MESSAGE_ID], "src-000");
    assert_eq!(attributes[SOURCE_QUEUE], &*poison.queue_url);
    assert_eq!(attributes["index"], "0");
    client.delete_queue().queue_url(&dlq).send().await.unwrap();
}

/// 12 attributes, 2 more than SQS takes: the message arrives with the first 9 as they are and
/// the other 3 in `sluice-packed-attributes` with their values and types; the sink counts it.
#[tokio::test]
async fn twelve_attributes_arrive_as_nine_plus_three_packed() {
    let aws = localstack().await;
    let client = Client::new(&aws);
    let target = queue(&client, false).await;
    let sink = sink(&aws, &target);
    let mut r = record("src-attrs");
    for i in 0..12 {
        r.message_attributes.insert(format!("attr{i:02}"), format!("value {i}"));
    }
    r.attribute_types.insert("attr11".into(), "Number".into());
    r.message_attributes.insert("attr11".into(), "11".into());
    assert_eq!(sink.deliver(&[Arc::new(r)]).await, vec![Outcome::Delivered]);
    assert_eq!(sink.stats().unwrap().packed(), 1);
    let got = drain(&client, &target, 1, PATIENCE).await;
    let [(_, _, attributes)] = got.as_slice() else { panic!("{got:?}") };
    assert_eq!(attributes.len(), 10, "{attributes:?}");
    for i in 0..9 {
        assert_eq!(attributes[&format!("attr{i:02}")], format!("value {i}"));
    }
    let packed: serde_json::Value = serde_json::from_str(&attributes[super::sqs_attributes::PACKED]).unwrap();
    assert_eq!(packed["attr09"], serde_json::json!({"DataType": "String", "StringValue": "value 9"}));
    assert_eq!(packed["attr10"], serde_json::json!({"DataType": "String", "StringValue": "value 10"}));
    assert_eq!(packed["attr11"], serde_json::json!({"DataType": "Number", "StringValue": "11"}));
    println!("12 attributes forwarded: 9 as they are, 3 packed: {packed}");
}
