//! Against LocalStack: the clients the reader builds count each request by service, API and queue,
//! and a call retried after a refused connection counts every attempt (each one is billed).

use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;

use super::*;
use crate::aws::SqsClients;

async fn base(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "requests-tests"))
        .endpoint_url(endpoint)
        .load()
        .await
}

fn counted(requests: &Requests, service: &str, api: &str, queue: &str) -> u64 {
    requests.counted(&RequestLabel { service: service.into(), api: api.into(), queue: queue.into() })
}

#[tokio::test]
async fn each_request_is_counted_by_api_and_queue() {
    let endpoint =
        std::env::var("SLUICE_LOCALSTACK_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into());
    let requests = Arc::new(Requests::default());
    let mut clients = SqsClients::new(base(&endpoint).await, requests.clone());
    let sqs = clients.client(None, None);
    let name = format!("requests-{}", fastrand::u32(..));
    let url = sqs.create_queue().queue_name(&name).send().await.expect("CreateQueue").queue_url.unwrap();
    for i in 0..3 {
        sqs.send_message().queue_url(&url).message_body(format!("m{i}")).send().await.expect("SendMessage");
    }
    let received = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap();
    let entries = received.messages().iter().enumerate().map(|(i, m)| {
        let handle = m.receipt_handle().unwrap_or_default();
        DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(handle).build().unwrap()
    });
    let delete = sqs.delete_message_batch().queue_url(&url).set_entries(Some(entries.collect()));
    delete.send().await.expect("DeleteMessageBatch");
    sqs.delete_queue().queue_url(&url).send().await.expect("DeleteQueue");

    assert_eq!(counted(&requests, "sqs", "SendMessage", &name), 3);
    assert_eq!(counted(&requests, "sqs", "ReceiveMessage", &name), 1);
    assert_eq!(counted(&requests, "sqs", "DeleteMessageBatch", &name), 1);
    assert_eq!(counted(&requests, "sqs", "CreateQueue", ""), 1);
    assert_eq!(requests.total(), 7, "the running total sums this reader's series, and only them");
}

#[tokio::test]
async fn every_attempt_of_a_retried_call_is_counted() {
    // A port nothing listens on: each attempt is refused and retried, up to the attempts allowed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let requests = Arc::new(Requests::default());
    let mut clients = SqsClients::new(base(&format!("http://{closed}")).await, requests.clone());
    let sqs = clients.client(None, None);
    let url = format!("http://{closed}/000000000000/refused");
    let answer = sqs.get_queue_attributes().queue_url(&url).send().await;
    assert!(answer.is_err(), "nothing listens there");
    assert_eq!(
        counted(&requests, "sqs", "GetQueueAttributes", "refused"),
        3,
        "the standard retry mode's 3 attempts"
    );
}

#[tokio::test]
async fn large_payloads_are_billed_by_the_64_kib_chunk() {
    let endpoint =
        std::env::var("SLUICE_LOCALSTACK_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into());
    let requests = Arc::new(Requests::default());
    let mut clients = SqsClients::new(base(&endpoint).await, requests.clone());
    let sqs = clients.client(None, None);
    let name = format!("billed-{}", fastrand::u32(..));
    let url = sqs.create_queue().queue_name(&name).send().await.expect("CreateQueue").queue_url.unwrap();
    // 200 KiB: four started chunks of 64 KiB, sent and received; SQS's largest, 1 MiB: sixteen
    // (and the JSON envelope's few hundred bytes start a seventeenth).
    for size in [200 * 1024, 1_048_576 - 1024] {
        sqs.send_message().queue_url(&url).message_body("x".repeat(size)).send().await.expect("SendMessage");
    }
    let billed = |api: &str| {
        requests
            .billed_family()
            .get_or_create(&RequestLabel { service: "sqs".into(), api: api.into(), queue: name.clone() })
            .get()
    };
    assert_eq!(billed("SendMessage"), 4 + 16, "200 KiB and 1023 KiB sent");
    let received = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap();
    let got: usize = received.messages().iter().map(|m| m.body().unwrap_or_default().len()).sum();
    let expected = u64::try_from(got).unwrap().div_ceil(65_536);
    let receive = billed("ReceiveMessage");
    assert!(
        receive == expected || receive == expected + 1,
        "a receive of {got} body bytes billed as {receive}, not {expected} (+1 for the envelope)"
    );
    sqs.delete_queue().queue_url(&url).send().await.expect("DeleteQueue");
    assert!(requests.billed_total() > requests.total(), "large payloads cost more than their request count");
}
