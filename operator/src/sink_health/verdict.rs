//! The `SinksHealthy` condition from the readers' sink health reports.
//!
//! Each reader writes its report in its lease ConfigMap, data key `sinkHealth`
//! (reader/src/cluster/health_report.rs says when and in which form). A sink is unhealthy when
//! some reader says it is stalled: deliveries to it failed and none succeeded for that reader's
//! `--unready-after-seconds` (the same test that turns the reader's `/readyz` false), or its
//! circuit is open. The payload fetches from S3 (`payloadFetches`) count the same way: a fetch
//! that fails for S3's fault holds its message just as a sink's outage does, so a reader holding
//! messages for S3 makes the condition False, naming the payload fetches (reason
//! `PayloadFetchFailing` when no sink fails too). Reports older than [`STALE_MS`] are a reader
//! that is gone, and are ignored.

use std::collections::BTreeMap;

use serde::Deserialize;
use sluice_crds::{SinkBlock, SinkSpec, SqsSourceSpec};

/// The data key readers write.
pub const KEY: &str = "sinkHealth";
/// A report older than this is ignored: readers refresh theirs at least every 30 s.
pub const STALE_MS: i64 = 90_000;

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub reported_at_ms: i64,
    #[serde(default)]
    pub sinks: BTreeMap<String, SinkReport>,
    /// The reader's fetches of payloads from S3 (no `circuit`); absent from a reader that fetched
    /// none, or from before this entry existed.
    #[serde(default)]
    pub payload_fetches: Option<SinkReport>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkReport {
    pub last_success_ms: Option<i64>,
    #[serde(default)]
    pub failures_since: u64,
    pub last_error: Option<String>,
    #[serde(default)]
    pub stalled: bool,
    /// The reader's circuit breaker for the sink: `closed`, `open` (receiving paused, messages
    /// held) or `half_open` (one held message probes the sink); absent from older readers.
    #[serde(default)]
    pub circuit: Option<String>,
}

/// The condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinksVerdict {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The fresh reports among a source's lease ConfigMaps' data (others are skipped: a lease of a
/// reader from before this report existed, or an unreadable one, says nothing about sinks).
pub fn fresh_reports<'a>(
    leases: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    now_ms: i64,
) -> Vec<Report> {
    leases
        .into_iter()
        .filter_map(|data| serde_json::from_str::<Report>(data.get(KEY)?).ok())
        .filter(|r| now_ms - r.reported_at_ms <= STALE_MS)
        .collect()
}

/// Per sink across readers: readers stalled, failures, the latest error and success.
#[derive(Default)]
struct Across {
    stalled_readers: usize,
    /// Readers whose circuit for the sink is open or half-open (receiving paused).
    paused_readers: usize,
    readers: usize,
    failures: u64,
    last_error: Option<String>,
    last_success_ms: Option<i64>,
}

/// The verdict for `spec`'s sinks (named with their field and target) from fresh `reports`.
pub fn verdict(spec: &SqsSourceSpec, reports: &[Report]) -> SinksVerdict {
    if reports.is_empty() {
        return SinksVerdict {
            status: "Unknown",
            reason: "NoReports",
            message: "no reader has reported its sinks' health in the last 90 s (readers report every 30 s while they run)".to_owned(),
        };
    }
    let mut sinks: BTreeMap<&str, Across> = BTreeMap::new();
    let mut fetches = Across::default();
    for report in reports {
        for (name, sink) in &report.sinks {
            sinks.entry(name).or_default().add(sink);
        }
        if let Some(fetch) = &report.payload_fetches {
            fetches.add(fetch);
        }
    }
    let mut failing: Vec<String> = sinks
        .iter()
        .filter(|(_, a)| a.stalled_readers > 0)
        .map(|(name, a)| describe(&target_of(spec, name), a))
        .collect();
    let sinks_failing = !failing.is_empty();
    if fetches.stalled_readers > 0 {
        failing.push(describe_fetches(spec, &fetches));
    }
    if failing.is_empty() {
        return SinksVerdict {
            status: "True",
            reason: "Delivering",
            message: format!(
                "no sink has gone without a successful delivery for the readers' --unready-after-seconds ({} reader(s) reporting)",
                reports.len()
            ),
        };
    }
    let (reason, what) = if sinks_failing {
        (
            "SinkFailing",
            "the messages are retried with backoff and nothing is deleted until a sink takes them: fix the sink or its target",
        )
    } else {
        (
            "PayloadFetchFailing",
            "the messages are held and fetched again with backoff and nothing is deleted until a sink takes them: fix the readers' access to the payloads' bucket (spec.payload.s3)",
        )
    };
    SinksVerdict {
        status: "False",
        reason,
        message: format!("{}; {what} (see the readers' WARN lines)", failing.join("; ")),
    }
}

impl Across {
    /// One reader's word about the sink (or the payload fetches).
    fn add(&mut self, report: &SinkReport) {
        self.readers += 1;
        self.failures += report.failures_since;
        self.last_success_ms = self.last_success_ms.max(report.last_success_ms);
        if report.circuit.as_deref().is_some_and(|c| c != "closed") {
            self.paused_readers += 1;
        }
        if report.stalled {
            self.stalled_readers += 1;
            self.last_error = report.last_error.clone().or(self.last_error.take());
        }
    }
}

/// `payload fetches from S3 (spec.payload.s3, endpoint E) fail on N of M reader(s)...`.
fn describe_fetches(spec: &SqsSourceSpec, a: &Across) -> String {
    let endpoint = spec.payload.s3.as_ref().and_then(|s3| s3.endpoint.as_deref());
    let endpoint = endpoint.map(|e| format!(", endpoint {e}")).unwrap_or_default();
    let answer = match timestamp(a.last_success_ms) {
        Some(at) => format!("S3's last answer {at}"),
        None => "no answer from S3 yet".to_owned(),
    };
    let error = a.last_error.as_deref().unwrap_or("no error text");
    format!(
        "payload fetches from S3 (spec.payload.s3{endpoint}) fail on {} of {} reader(s) (receiving paused, messages held), {} failures since ({answer}); last error: {error}",
        a.stalled_readers, a.readers, a.failures
    )
}

fn timestamp(ms: Option<i64>) -> Option<k8s_openapi::jiff::Timestamp> {
    ms.and_then(|ms| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
}

/// `sink NAME (FIELD, TARGET)`: which sink, where the spec names it, and what it writes to.
fn target_of(spec: &SqsSourceSpec, name: &str) -> String {
    let named = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let mut all = named.chain(spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s)));
    match all.find(|(_, s)| s.name == name) {
        Some((field, sink)) => format!("sink {name} ({field}, {})", target(sink)),
        None => format!("sink {name}"),
    }
}

fn target(sink: &SinkSpec) -> String {
    match sink.block() {
        Some(SinkBlock::Http(http)) => format!("url {}", http.url),
        Some(SinkBlock::Sqs(sqs)) => format!("queue {}", sqs.queue_url),
        Some(SinkBlock::S3(s3)) => format!("bucket {}", s3.bucket),
        Some(SinkBlock::Log(_)) | None => "log".to_owned(),
    }
}

fn describe(sink: &str, a: &Across) -> String {
    let success = match timestamp(a.last_success_ms) {
        Some(at) => format!("last success {at}"),
        None => "no success yet".to_owned(),
    };
    let error = a.last_error.as_deref().unwrap_or("no error text");
    let paused = match a.paused_readers {
        0 => String::new(),
        n => format!(", circuit open on {n} (receiving paused, messages held)"),
    };
    format!(
        "{sink} fails on {} of {} reader(s){paused}, {} failures since their last success ({success}); last error: {error}",
        a.stalled_readers, a.readers, a.failures
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SqsSourceSpec {
        serde_json::from_value(serde_json::json!({
            "queues": [{ "url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders" }],
            "sinks": [{ "name": "web", "http": { "url": "https://hooks.example/in" } }],
        }))
        .expect("a spec")
    }

    fn lease(reported_at_ms: i64, sinks: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("holder".to_owned(), "orders-reader-1".to_owned()),
            (KEY.to_owned(), format!(r#"{{"reportedAtMs":{reported_at_ms},"sinks":{sinks}}}"#)),
        ])
    }

    #[test]
    fn a_stalled_sink_on_any_reader_makes_the_condition_false_with_one_readable_line() {
        let now = 1_000_000;
        let leases = [
            lease(
                now - 1_000,
                r#"{"web":{"lastSuccessMs":null,"failuresSince":40,"lastError":"HTTP 503 from https://hooks.example/in","stalled":true}}"#,
            ),
            lease(
                now - 2_000,
                r#"{"web":{"lastSuccessMs":0,"failuresSince":2,"lastError":"HTTP 503","stalled":false}}"#,
            ),
            // A dead reader's report is ignored, and a lease without one is not a report.
            lease(now - STALE_MS - 1, r#"{"web":{"failuresSince":9,"stalled":true}}"#),
            BTreeMap::from([("holder".to_owned(), "x".to_owned())]),
        ];
        let reports = fresh_reports(&leases, now);
        assert_eq!(reports.len(), 2);
        let v = verdict(&spec(), &reports);
        assert_eq!((v.status, v.reason), ("False", "SinkFailing"));
        assert!(v.message.starts_with(
            "sink web (spec.sinks[0], url https://hooks.example/in) fails on 1 of 2 reader(s), 42 failures since their last success (last success 1970-01-01T00:00:00Z); last error: HTTP 503 from https://hooks.example/in; "
        ), "{}", v.message);
        assert!(!v.message.contains('\n') && !v.message.contains("Some("));
    }

    #[test]
    fn an_open_circuit_is_named_in_the_message() {
        let now = 1_000_000;
        let open = r#"{"web":{"lastSuccessMs":null,"failuresSince":5,"lastError":"HTTP 503","stalled":true,"circuit":"open"}}"#;
        let probing =
            r#"{"web":{"lastSuccessMs":null,"failuresSince":6,"stalled":true,"circuit":"half_open"}}"#;
        let closed = r#"{"web":{"lastSuccessMs":3,"failuresSince":0,"stalled":false,"circuit":"closed"}}"#;
        let leases = [lease(now, open), lease(now, probing), lease(now, closed)];
        let v = verdict(&spec(), &fresh_reports(&leases, now));
        assert_eq!((v.status, v.reason), ("False", "SinkFailing"));
        assert!(
            v.message.contains(
                "fails on 2 of 3 reader(s), circuit open on 2 (receiving paused, messages held), 11 failures"
            ),
            "{}",
            v.message
        );
    }

    #[test]
    fn held_payload_fetches_are_named_and_a_failing_sink_keeps_its_reason() {
        let now = 1_000_000;
        let healthy = r#"{"web":{"lastSuccessMs":3,"failuresSince":0,"stalled":false,"circuit":"closed"}}"#;
        let fetching = |sinks: &str, stalled: bool| {
            let report = format!(
                r#"{{"reportedAtMs":{now},"sinks":{sinks},"payloadFetches":{{"lastSuccessMs":null,"failuresSince":4,"lastError":"GetObject s3://b/k: connection refused","stalled":{stalled}}}}}"#
            );
            BTreeMap::from([(KEY.to_owned(), report)])
        };
        let leases = [fetching(healthy, true), fetching(healthy, false)];
        let v = verdict(&spec(), &fresh_reports(&leases, now));
        assert_eq!((v.status, v.reason), ("False", "PayloadFetchFailing"));
        assert!(
            v.message.starts_with(
                "payload fetches from S3 (spec.payload.s3) fail on 1 of 2 reader(s) (receiving paused, messages held), 8 failures since (no answer from S3 yet); last error: GetObject s3://b/k: connection refused; "
            ),
            "{}",
            v.message
        );
        let failing = r#"{"web":{"failuresSince":5,"stalled":true,"circuit":"open"}}"#;
        let v = verdict(&spec(), &fresh_reports(&[fetching(failing, true)], now));
        assert_eq!(v.reason, "SinkFailing");
        assert!(v.message.contains("sink web") && v.message.contains("payload fetches"), "{}", v.message);
        assert_eq!(verdict(&spec(), &fresh_reports(&[fetching(healthy, false)], now)).status, "True");
    }

    #[test]
    fn healthy_and_unknown() {
        let now = 1_000_000;
        let ok = [lease(now, r#"{"web":{"lastSuccessMs":5,"failuresSince":0,"stalled":false}}"#)];
        let v = verdict(&spec(), &fresh_reports(&ok, now));
        assert_eq!((v.status, v.reason), ("True", "Delivering"));
        let v = verdict(&spec(), &fresh_reports(&[], now));
        assert_eq!((v.status, v.reason), ("Unknown", "NoReports"));
    }
}
