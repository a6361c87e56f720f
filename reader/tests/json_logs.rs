//! `--log-format json` on a real reader process: every stderr line is one JSON object of the
//! shape both binaries share, and the receive and delivery lines name the source, its namespace,
//! the queue and the sink. LocalStack is started when it does not
//! answer.

mod support;

use std::time::Duration;

use serde_json::Value;
use sluice_tests::localstack::{Outgoing, fresh_queue};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;
use support::sink_server::SinkServer;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn json_lines_carry_source_namespace_queue_and_sink() {
    let (sink, addr) = SinkServer::start().await;
    let (endpoint, queue) = fresh_queue("json-logs", 30).await.expect("LocalStack and a queue");
    queue.send_messages((0..5).map(|i| Outgoing::new(format!("log-{i}"))), 1).await.unwrap();
    let yaml = SourceYaml::bare("orders", &queue.url, &endpoint)
        .namespace("shop")
        .wait_time(1)
        .sink("web", Sink::http(&format!("http://{addr}/")).timeout_ms(2000))
        .yaml();
    let mut reader = Reader::start_logging(&yaml, &["--log-format", "json"], "info,sluice_reader=debug");
    let deleted = reader.wait_metric("sluice_reader_deleted_messages_total", 5.0, 60 * SECOND).await;
    assert_eq!(deleted, 5.0, "stderr:\n{}", reader.stderr());
    reader.sigterm();
    assert_eq!(reader.exit_code(20 * SECOND).await, 0, "stderr:\n{}", reader.stderr());
    assert_eq!(sink.received().len(), 5);

    let stderr = reader.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
        .collect();
    assert!(lines.len() >= 3, "{stderr}");
    for line in &lines {
        assert_shape(line);
        assert_eq!(line["source"], "orders", "{line}");
        assert_eq!(line["namespace"], "shop", "{line}");
    }
    let queue_name = queue.name.as_str();
    let received: Vec<&Value> = lines.iter().filter(|l| l["message"] == "received").collect();
    assert!(!received.is_empty(), "a receive line: {stderr}");
    for line in received {
        assert_eq!(line["queue"], queue_name, "{line}");
        assert!(line["messages"].as_u64().is_some_and(|n| n > 0), "{line}");
    }
    let delivered: Vec<&Value> = lines.iter().filter(|l| l["message"] == "delivered").collect();
    assert!(!delivered.is_empty(), "a delivery line: {stderr}");
    for line in &delivered {
        assert_eq!(line["queue"], queue_name, "{line}");
        assert_eq!(line["sink"], "web", "{line}");
    }
    let total: u64 = delivered.iter().filter_map(|l| l["delivered"].as_u64()).sum();
    assert_eq!(total, 5, "{stderr}");
}

/// The head every line of either binary starts with (the operator checks the same in its unit
/// test): `timestamp`, `level`, `target`, `message`, all strings, no nested span objects.
fn assert_shape(line: &Value) {
    let object = line.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
    for key in sluice_logs::HEAD.iter().chain(&["message"]) {
        assert!(object.get(*key).is_some_and(Value::is_string), "{key} missing: {line}");
    }
    assert!(object.values().all(|v| !v.is_object()), "span fields are flattened: {line}");
}
