//! Bad configuration ends the reader with exit 2 and a message naming the field, before it
//! touches any queue; an unreachable endpoint does not (it is an outage).

mod support;

use std::time::Duration;

use sluice_tests::localstack::{LocalStack, Outgoing, fresh_queue};
use sluice_tests::source::{Sink, SourceYaml};
use support::process::Reader;

const QUEUE: &str = "http://127.0.0.1:4566/queue/us-east-1/000000000000/absent";

/// A source `bad` reading `queue` at `endpoint` into a `log` sink.
fn source(queue: &str, endpoint: &str) -> SourceYaml {
    SourceYaml::bare("bad", queue, endpoint).sink("l", Sink::log())
}

async fn exits_2_naming(yaml: &str, field: &str) {
    let mut reader = Reader::start(yaml, &[]);
    let code = reader.exit_code(Duration::from_secs(30)).await;
    let stderr = reader.stderr();
    assert_eq!(code, 2, "stderr:\n{stderr}");
    assert!(stderr.contains(field), "{field:?} not named in:\n{stderr}");
}

#[tokio::test]
async fn a_malformed_queue_url_is_named() {
    let yaml = source("queue please", "").without_endpoint().yaml();
    exits_2_naming(&yaml, "spec.queues[0].url").await;
}

/// An endpoint that does not answer is an outage, not a mistake in the spec: the reader stays up,
/// not ready, names the field in a WARN line, tries again, and stops cleanly when told.
#[tokio::test]
async fn an_unreachable_endpoint_is_retried_while_not_ready() {
    let yaml = source(QUEUE, "http://127.0.0.1:9").yaml();
    let mut reader = Reader::start(&yaml, &[]);
    let mut warnings = 0;
    // Up to 40 s: a second WARN comes no sooner than the events' 10 s window and then at the next
    // retry of the backoff (1, 2, 4, 8 s: about 15 s after the first), plus the reader's start; a
    // bound of 20 s was missed once on a busy machine. The loop ends at the second line.
    for _ in 0..400 {
        warnings = reader
            .stderr()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("spec.queues[0].endpoint"))
            .count();
        if warnings >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(warnings >= 2, "tried again with a WARN line naming the field:\n{}", reader.stderr());
    let admin = reader.admin().await;
    let ready = reqwest::get(format!("http://{admin}/readyz")).await.unwrap().status();
    assert!(!ready.is_success(), "/readyz answered {ready} during the outage");
    reader.sigterm();
    assert_eq!(reader.exit_code(Duration::from_secs(10)).await, 0, "stderr:\n{}", reader.stderr());
}

#[tokio::test]
async fn an_unknown_field_is_named() {
    let yaml = source(QUEUE, "").without_endpoint().queue_field("colour", "blue").yaml_unchecked();
    exits_2_naming(&yaml, "colour").await;
}

#[tokio::test]
async fn a_malformed_sink_url_is_named_and_nothing_is_received() {
    let (endpoint, queue) = fresh_queue("c1-badsink", 30).await.expect("LocalStack and a queue");
    queue.send_messages([Outgoing::new("keep-me")], 1).await.unwrap();
    let yaml =
        SourceYaml::bare("bad", &queue.url, &endpoint).sink("web", Sink::http("http//missing-colon")).yaml();
    exits_2_naming(&yaml, "spec.sinks[0].http.url").await;
    assert_eq!(queue.approximate_counts().await.unwrap().pair(), (1, 0), "the message is untouched");
}

#[tokio::test]
async fn a_missing_queue_is_named() {
    let endpoint = LocalStack::ensure().await.expect("LocalStack");
    let url = format!("{}/queue/us-east-1/000000000000/c1-never-created-{}", endpoint, fastrand::u64(..));
    let yaml = source(&url, &endpoint).yaml();
    exits_2_naming(&yaml, "spec.queues[0].url").await;
}
