//! The JSON shape, through the same subscriber `init` installs, written to a buffer.

use serde_json::Value;
use tracing_subscriber::EnvFilter;

use crate::capture::Captured;
use crate::{ProcessFields, json_subscriber};

fn keys(line: &Value) -> Vec<&str> {
    line.as_object().expect("an object").keys().map(String::as_str).collect()
}

#[test]
fn span_and_process_fields_are_flattened_beside_the_event_fields() {
    let out = Captured::default();
    let process = ProcessFields::default();
    let subscriber = json_subscriber(EnvFilter::new("debug"), out.clone(), process.clone());
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!("before the process has a name");
        process.set([("source", "orders"), ("namespace", "shop"), ("empty", "")]);
        let poll = tracing::info_span!("poll", queue = "orders-q");
        let _poll = poll.enter();
        let deliver = tracing::info_span!("deliver", sink = "web", queue = "inner-q");
        let _deliver = deliver.enter();
        tracing::debug!(records = 3_u64, ok = true, error = %"boom", level = "shadowed", "delivered");
    });
    let lines = out.lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(keys(&lines[0]), ["level", "message", "target", "timestamp"]);
    assert!(out.text().lines().all(|l| l.starts_with(r#"{"timestamp":"#)), "{}", out.text());
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(lines[0]["message"], "before the process has a name");
    let line = &lines[1];
    assert!(
        out.text().lines().nth(1).is_some_and(|l| l.contains(r#""target":"sluice_logs::tests","message":"#))
    );
    assert_eq!(line["level"], "DEBUG", "an event field never overrides the head");
    assert_eq!(line["target"], "sluice_logs::tests");
    assert_eq!(line["message"], "delivered");
    assert_eq!(line["records"], 3);
    assert_eq!(line["ok"], true);
    assert_eq!(line["error"], "boom");
    assert_eq!(line["sink"], "web");
    assert_eq!(line["queue"], "inner-q", "the innermost span wins");
    assert_eq!(line["source"], "orders");
    assert_eq!(line["namespace"], "shop");
    assert!(line.get("empty").is_none());
    assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
}
