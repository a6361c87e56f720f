//! Bad configuration ends the reader with exit 2 and a message naming the field, before it
//! touches any queue; an unreachable endpoint does not (it is an outage).

mod support;

use std::time::Duration;

use support::process::Reader;
use support::sqs::Sqs;

const QUEUE: &str = "http://127.0.0.1:4566/queue/us-east-1/000000000000/absent";

fn spec(queues: &str, sinks: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {{name: bad}}\nspec:\n  queues: {queues}\n  sinks: {sinks}\n"
    )
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
    exits_2_naming(&spec("[{url: 'queue please'}]", "[{name: l, log: {}}]"), "spec.queues[0].url").await;
}

/// An endpoint that does not answer is an outage, not a mistake in the spec: the reader stays up,
/// not ready, names the field in a WARN line, tries again, and stops cleanly when told.
#[tokio::test]
async fn an_unreachable_endpoint_is_retried_while_not_ready() {
    let yaml = spec(&format!("[{{url: '{QUEUE}', endpoint: 'http://127.0.0.1:9'}}]"), "[{name: l, log: {}}]");
    let mut reader = Reader::start(&yaml, &[]);
    let mut warnings = 0;
    for _ in 0..200 {
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
    let yaml = spec(&format!("[{{url: '{QUEUE}', colour: blue}}]"), "[{name: l, log: {}}]");
    exits_2_naming(&yaml, "colour").await;
}

#[tokio::test]
async fn a_malformed_sink_url_is_named_and_nothing_is_received() {
    let Some(sqs) = Sqs::connect().await else { return };
    let queue = sqs.queue("c1-badsink", false, 30).await;
    sqs.send(&queue, &[("keep-me".to_string(), None)]).await;
    let yaml = spec(
        &format!("[{{url: '{queue}', endpoint: '{}'}}]", sqs.endpoint),
        "[{name: web, http: {url: 'http//missing-colon'}}]",
    );
    exits_2_naming(&yaml, "spec.sinks[0].http.url").await;
    assert_eq!(sqs.counts(&queue).await, (1, 0), "the message is untouched");
}

#[tokio::test]
async fn a_missing_queue_is_named() {
    let Some(sqs) = Sqs::connect().await else { return };
    let url = format!("{}/queue/us-east-1/000000000000/c1-never-created-{}", sqs.endpoint, fastrand::u64(..));
    let yaml = spec(&format!("[{{url: '{url}', endpoint: '{}'}}]", sqs.endpoint), "[{name: l, log: {}}]");
    exits_2_naming(&yaml, "spec.queues[0].url").await;
}
