//! Every manifest under deploy/examples/ must pass the same validation the reader and the local
//! control plane apply, so the documented examples cannot rot.

use std::path::PathBuf;

use sluice_crds::{Guarantee, SinkKind, validate::parse_source_yaml};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples")
}

fn load(name: &str) -> sluice_crds::SqsSource {
    let path = examples_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_source_yaml(&text).unwrap_or_else(|e| panic!("{} is invalid:\n{e}", path.display()))
}

#[test]
fn every_example_validates() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples_dir()).expect("deploy/examples exists") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            load(path.file_name().and_then(|n| n.to_str()).expect("utf-8 file name"));
            seen += 1;
        }
    }
    assert!(seen >= 3, "expected at least three examples, found {seen}");
}

#[test]
fn minimal_http_is_at_least_once_to_http() {
    let source = load("minimal-http.yaml");
    assert_eq!(source.spec.delivery.guarantee, Guarantee::AtLeastOnce);
    assert_eq!(source.spec.sinks[0].kind(), Some(SinkKind::Http));
    assert_eq!(source.spec.receive.max_messages, 10, "defaults are filled in");
}

#[test]
fn exactly_once_s3_is_exactly_once_to_s3() {
    let source = load("exactly-once-s3.yaml");
    assert!(source.spec.is_exactly_once());
    assert_eq!(source.spec.delivery.checkpoint_interval_seconds, Some(10));
    assert_eq!(source.spec.sinks[0].kind(), Some(SinkKind::S3));
}

#[test]
fn fifo_dead_letter_reads_fifo_and_dead_letters_to_sqs() {
    let source = load("fifo-dead-letter.yaml");
    assert!(source.spec.queues.iter().all(|q| q.is_fifo()));
    assert_eq!(source.spec.sinks[0].kind(), Some(SinkKind::Sqs));
    let dead = source.spec.dead_letter_sink.as_ref().expect("a dead-letter sink");
    assert_eq!(dead.kind(), Some(SinkKind::Sqs));
}
