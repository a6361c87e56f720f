//! Message attributes through the reader binary against LocalStack: the dead-letter route and
//! the sqs sink keep each attribute's DataType (Binary stays bytes, Number stays Number), and a
//! message with SQS's maximum of 10 attributes keeps all ten when dead-lettered (the reason is
//! then left out, as the CRD docs say), while one with fewer gets its reason packed beside them.
//!
//! LocalStack is started when it does not answer (`sluice_tests::localstack`).

#[allow(dead_code)]
#[path = "support/load_metrics.rs"]
mod load_metrics;
mod support;

use std::time::Duration;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use sluice_tests::localstack::{Outgoing, QueueOptions, TestQueue, fresh_queue};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);

/// `n` attributes of mixed types: String, Number, Binary and a custom Number type in turn.
fn attributes(n: usize) -> Vec<(String, MessageAttributeValue)> {
    (0..n)
        .map(|i| {
            let v = match i % 4 {
                0 => MessageAttributeValue::builder().data_type("String").string_value(format!("s{i}")),
                1 => MessageAttributeValue::builder().data_type("Number").string_value(format!("{i}.5")),
                2 => MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(Blob::new(vec![0, 255, i as u8])),
                _ => MessageAttributeValue::builder().data_type("Number.int").string_value(format!("{i}")),
            };
            (format!("a{i}"), v.build().unwrap())
        })
        .collect()
}

fn assert_same(
    sent: &[(String, MessageAttributeValue)],
    got: &std::collections::HashMap<String, MessageAttributeValue>,
) {
    for (name, value) in sent {
        let got = got.get(name).unwrap_or_else(|| panic!("attribute {name} lost; got {got:?}"));
        assert_eq!(got.data_type(), value.data_type(), "{name}");
        assert_eq!(got.string_value(), value.string_value(), "{name}");
        assert_eq!(got.binary_value(), value.binary_value(), "{name}");
    }
}

#[tokio::test]
async fn dead_letters_and_the_sqs_sink_keep_attribute_types_up_to_ten() {
    let (_sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("attr-src", 30).await.expect("LocalStack and a queue");
    let dlq = TestQueue::create_with(queue.client(), "attr-dlq", false, &QueueOptions::visibility(30))
        .await
        .unwrap();
    let out = TestQueue::create_with(queue.client(), "attr-out", false, &QueueOptions::visibility(30))
        .await
        .unwrap();
    // Poison (400 at the http sink) with 10 and with 8 attributes; a good one routed to sqs.
    let cases = [("poison-ten", 10), ("poison-eight", 8), ("forward-ten", 10)];
    let messages = cases.map(|(body, n)| {
        attributes(n)
            .into_iter()
            .fold(Outgoing::new(body), |m, (name, value)| m.attribute_value(&name, value))
    });
    queue.send_messages(messages, 1).await.unwrap();
    // Both sinks take every message; the http sink refuses `poison*` (400): dead-lettered.
    let yaml = SourceYaml::bare("it", &queue.url, &endpoint)
        .wait_time(1)
        .sink("web", Sink::http(&format!("http://{addr}/")))
        .sink("out", Sink::sqs(&out.url, &endpoint))
        .dead_letter("dlq", Sink::sqs(&dlq.url, &endpoint))
        .yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 3.0, 60 * SECOND).await;
    assert_eq!(deleted, 3.0, "stderr:\n{}", reader.stderr());
    let left_out = load_metrics::labelled(
        reader.admin().await,
        "sluice_reader_errors_total",
        &["error_type=\"reason_left_out_at_attribute_limit\""],
    )
    .await;
    assert_eq!(left_out, 1.0, "the left-out reason is counted");
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());

    let forwarded = out.drain_messages().await.unwrap();
    assert_eq!(forwarded.len(), 3, "the sqs sink forwarded every message");
    for m in &forwarded {
        let n = cases.iter().find(|(b, _)| Some(*b) == m.body()).map(|(_, n)| *n).unwrap();
        let got = m.message_attributes().cloned().unwrap_or_default();
        assert_eq!(got.len(), n, "{:?}: every attribute forwarded", m.body());
        assert_same(&attributes(n), &got);
    }
    let dead = dlq.drain_messages().await.unwrap();
    assert_eq!(dead.len(), 2, "both poison messages dead-lettered");
    for m in &dead {
        let got = m.message_attributes().cloned().unwrap_or_default();
        match m.body() {
            Some("poison-ten") => {
                assert_eq!(got.len(), 10, "the user's ten attributes, no room for the reason: {got:?}");
                assert_same(&attributes(10), &got);
            }
            Some("poison-eight") => {
                assert_eq!(got.len(), 9, "eight of the user's and the packed reason: {got:?}");
                assert_same(&attributes(8), &got);
                let packed = got["sluice-dead-letter"].string_value().unwrap();
                let packed: serde_json::Value = serde_json::from_str(packed).unwrap();
                assert!(packed["reason"].as_str().unwrap().contains("400"), "{packed}");
                assert_eq!(packed["sourceQueue"], queue.url.as_str());
            }
            other => panic!("unexpected dead letter {other:?}"),
        }
    }
    assert!(
        reader.stderr().contains("dead-lettered without its sluice-* reason attributes"),
        "the left-out reason is logged:\n{}",
        reader.stderr()
    );
}
