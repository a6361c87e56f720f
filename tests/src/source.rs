//! SqsSource manifests for the suites and benchmarks, written through one builder with named options.
//!
//! Why a builder over a YAML tree and not sluice-crds' typed spec: serialising the typed spec writes
//! every defaulted field, so the object applied would differ from what a user writes (CEL rules test
//! fields with `has()`, and the reader's rendered config would carry values no test chose). Here only
//! the fields a test sets are written. [`SourceYaml::yaml`] parses its output as an `SqsSource`, so a
//! misspelt field fails in the test that wrote it, not later at the API.

use serde_json::{Map, Value, json};
use sluice_crds::SqsSource;

/// An SqsSource manifest being built. Start with [`SourceYaml::new`] (for the system with the
/// operator) or [`SourceYaml::bare`] (only the queue), add sinks and options, then
/// render with [`SourceYaml::yaml`].
#[derive(Debug, Clone)]
pub struct SourceYaml {
    doc: Value,
}

impl SourceYaml {
    /// A source `name` in namespace `default` reading `queue_url` at `endpoint`, set as the suites run
    /// it: 2 pollers with 1 s long polls, the autoscaler polling the queue every second, reader logs at
    /// info. It has no sink until [`Self::sink`] adds one.
    pub fn new(name: &str, queue_url: &str, endpoint: &str) -> Self {
        let mut source = Self::bare(name, queue_url, endpoint).pollers(2).wait_time(1).poll_interval(1);
        source.doc["metadata"]["namespace"] = json!("default");
        source.doc["spec"]["reader"] = json!({"logLevel": "info"});
        source
    }

    /// A source with only its name and queue, everything else left to the defaults (a reader run
    /// without the operator, `sluice-reader --source FILE`, or a user's first manifest). It has no
    /// sink until [`Self::sink`] adds one.
    pub fn bare(name: &str, queue_url: &str, endpoint: &str) -> Self {
        let doc = json!({
            "apiVersion": "sluice.dev/v1alpha1",
            "kind": "SqsSource",
            "metadata": {"name": name},
            "spec": {
                "queues": [{"url": queue_url, "endpoint": endpoint}],
                "sinks": [],
            },
        });
        Self { doc }
    }

    /// An at-least-once source `name` whose readers each drain a steady few messages per second
    /// behind the `sink_url` sink (2 concurrent requests, a small held bound), with
    /// `targetMessagesPerReplica` so high that depth alone never asks for a second of its 1 to
    /// `max` replicas, and no scale-down within a test: for the suites of the rate- and
    /// latency-based scaling.
    pub fn behind_slow_sink(name: &str, queue_url: &str, endpoint: &str, sink_url: &str, max: i32) -> Self {
        Self::new(name, queue_url, endpoint)
            .at_least_once()
            .visibility_timeout(30)
            .held_max_messages(20)
            .sink("webhook", Sink::http(sink_url).timeout_ms(5_000).concurrency(2))
            .replicas(1, max)
            .target_per_replica(100_000)
            .scale_down_stabilization(600)
    }

    /// Put the source in `namespace` (a standalone reader names it in its log lines).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.doc["metadata"]["namespace"] = json!(namespace);
        self
    }

    /// A label on the source (a change to it starts a reconcile without changing the readers).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.doc["metadata"]["labels"][key] = json!(value);
        self
    }

    /// `receive.pollers`: concurrent ReceiveMessage loops per reader.
    pub fn pollers(self, pollers: u32) -> Self {
        self.set("receive", "pollers", pollers)
    }

    /// `receive.waitTimeSeconds`: how long a ReceiveMessage call waits for messages.
    pub fn wait_time(self, seconds: u32) -> Self {
        self.set("receive", "waitTimeSeconds", seconds)
    }

    /// `receive.maxMessages`: messages per ReceiveMessage call.
    pub fn max_messages(self, max: u32) -> Self {
        self.set("receive", "maxMessages", max)
    }

    /// `receive.visibilityTimeoutSeconds`.
    pub fn visibility_timeout(self, seconds: u32) -> Self {
        self.set("receive", "visibilityTimeoutSeconds", seconds)
    }

    /// `receive.held.maxMessages`: the most messages one reader holds.
    pub fn held_max_messages(mut self, max: u32) -> Self {
        self.doc["spec"]["receive"]["held"]["maxMessages"] = max.into();
        self
    }

    /// `rateLimit.messagesPerSecond` for the whole source.
    pub fn rate_limit(self, messages_per_second: u32) -> Self {
        self.set("rateLimit", "messagesPerSecond", messages_per_second)
    }

    /// `delivery.guarantee: atLeastOnce`, written out.
    pub fn at_least_once(self) -> Self {
        self.set("delivery", "guarantee", "atLeastOnce")
    }

    /// `delivery.guarantee: exactlyOnce` with a checkpoint every `interval_seconds`.
    pub fn exactly_once(self, interval_seconds: u32) -> Self {
        self.set("delivery", "guarantee", "exactlyOnce").set(
            "delivery",
            "checkpointIntervalSeconds",
            interval_seconds,
        )
    }

    /// Adds a sink named `name` to `spec.sinks`.
    pub fn sink(mut self, name: &str, sink: Sink) -> Self {
        let mut entry = Map::new();
        entry.insert("name".to_owned(), json!(name));
        entry.insert(sink.kind.to_owned(), Value::Object(sink.fields));
        if let Some(route) = sink.route {
            entry.insert("route".to_owned(), route);
        }
        let entry = Value::Object(entry);
        self.doc["spec"]["sinks"].as_array_mut().expect("spec.sinks is a list").push(entry);
        self
    }

    /// `scaling.minReplicas` and `scaling.maxReplicas`.
    pub fn replicas(self, min: i32, max: i32) -> Self {
        self.set("scaling", "minReplicas", min).set("scaling", "maxReplicas", max)
    }

    /// `scaling.targetMessagesPerReplica`.
    pub fn target_per_replica(self, messages: u32) -> Self {
        self.set("scaling", "targetMessagesPerReplica", messages)
    }

    /// `scaling.targetDrainSeconds`.
    pub fn target_drain(self, seconds: u32) -> Self {
        self.set("scaling", "targetDrainSeconds", seconds)
    }

    /// `scaling.targetLatencySeconds`: the delivery latency the autoscaler keeps under.
    pub fn target_latency(self, seconds: u32) -> Self {
        self.set("scaling", "targetLatencySeconds", seconds)
    }

    /// `spec.suspend`: true scales the readers to 0 and pauses the source.
    pub fn suspend(mut self, suspend: bool) -> Self {
        self.doc["spec"]["suspend"] = json!(suspend);
        self
    }

    /// `scaling.pollIntervalSeconds`: how often the autoscaler reads the queue.
    pub fn poll_interval(self, seconds: u64) -> Self {
        self.set("scaling", "pollIntervalSeconds", seconds)
    }

    /// `scaling.scaleDownStabilizationSeconds`.
    pub fn scale_down_stabilization(self, seconds: u32) -> Self {
        self.set("scaling", "scaleDownStabilizationSeconds", seconds)
    }

    /// `scaling.idleCooldownSeconds`.
    pub fn idle_cooldown(self, seconds: u32) -> Self {
        self.set("scaling", "idleCooldownSeconds", seconds)
    }

    /// `reader.terminationGracePeriodSeconds`.
    pub fn grace_period(self, seconds: u32) -> Self {
        self.set("reader", "terminationGracePeriodSeconds", seconds)
    }

    /// `spec.filter`: `expression`, with `onMismatch: delete`.
    pub fn filter_deleting(self, expression: &str) -> Self {
        self.set("filter", "expression", expression).set("filter", "onMismatch", "delete")
    }

    /// The manifest as YAML. Panics if it does not parse as an SqsSource: a test built it wrong.
    /// `delivery.unreadyAfterSeconds`: how long a fault lasts before the reader reports not ready.
    pub fn unready_after(self, seconds: u32) -> Self {
        self.set("delivery", "unreadyAfterSeconds", seconds)
    }

    pub fn yaml(&self) -> String {
        let yaml = serde_yaml::to_string(&self.doc).expect("a JSON tree renders as YAML");
        if let Err(e) = serde_yaml::from_str::<SqsSource>(&yaml) {
            panic!("the SqsSource a test built does not parse: {e}\n{yaml}");
        }
        yaml
    }

    fn set(mut self, section: &str, field: &str, value: impl Into<Value>) -> Self {
        self.doc["spec"][section][field] = value.into();
        self
    }
}

/// One sink of [`SourceYaml::sink`]: its kind and fields, with named options for the ones the suites
/// set.
#[derive(Debug, Clone)]
pub struct Sink {
    kind: &'static str,
    fields: Map<String, Value>,
    /// `route` of the sink (beside its kind's block).
    route: Option<Value>,
}

impl Sink {
    /// An `http` sink posting CloudEvents to `url`.
    pub fn http(url: &str) -> Self {
        Self::of("http", json!({"url": url}))
    }

    /// An `s3` sink writing under `prefix` in `bucket` at `endpoint` (region us-east-1).
    pub fn s3(bucket: &str, prefix: &str, endpoint: &str) -> Self {
        Self::of(
            "s3",
            json!({"bucket": bucket, "prefix": prefix, "endpoint": endpoint, "region": "us-east-1"}),
        )
    }

    /// An `sqs` sink forwarding to `queue_url` at `endpoint`.
    pub fn sqs(queue_url: &str, endpoint: &str) -> Self {
        Self::of("sqs", json!({"queueUrl": queue_url, "endpoint": endpoint}))
    }

    /// A `log` sink: one line per record on the reader's output.
    pub fn log() -> Self {
        Self::of("log", json!({}))
    }

    /// `timeoutMs` of an http sink.
    pub fn timeout_ms(self, ms: u64) -> Self {
        self.with("timeoutMs", ms)
    }

    /// `concurrency` of an http sink.
    pub fn concurrency(self, requests: u32) -> Self {
        self.with("concurrency", requests)
    }

    /// `messageGroupId` of an sqs sink to a FIFO queue.
    pub fn message_group_id(self, group: &str) -> Self {
        self.with("messageGroupId", group)
    }

    /// `buffer` of an s3 sink: its hints.
    pub fn buffer(self, max_bytes: u64, max_records: u32, max_seconds: u32) -> Self {
        self.with(
            "buffer",
            json!({"maxBytes": max_bytes, "maxRecords": max_records, "maxSeconds": max_seconds}),
        )
    }

    /// `compression` of an s3 sink (`none`, `gzip`, `zstd`).
    pub fn compression(self, compression: &str) -> Self {
        self.with("compression", compression)
    }

    /// `keyTemplate` of an s3 sink, e.g. `{yyyy}/{MM}/{dd}/{HH}`.
    pub fn key_template(self, template: &str) -> Self {
        self.with("keyTemplate", template)
    }

    /// `route`: the sink takes only the messages whose String attribute `attribute` is one of
    /// `values`.
    pub fn route(mut self, attribute: &str, values: &[&str]) -> Self {
        self.route = Some(json!({"attribute": attribute, "values": values}));
        self
    }

    fn of(kind: &'static str, fields: Value) -> Self {
        let Value::Object(fields) = fields else { unreachable!("built from an object literal") };
        Self { kind, fields, route: None }
    }

    fn with(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(field.to_owned(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suite_source_parses_with_what_was_set_and_nothing_else() {
        let yaml = SourceYaml::new("orders", "http://127.0.0.1:4566/queue/q", "http://127.0.0.1:4566")
            .label("touch", "3")
            .visibility_timeout(5)
            .replicas(2, 2)
            .grace_period(5)
            .sink("webhook", Sink::http("http://127.0.0.1:9/").timeout_ms(2000))
            .yaml();
        let source: SqsSource = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(source.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(source.metadata.labels.unwrap()["touch"], "3");
        let tree: Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(
            tree["spec"]["receive"],
            json!({"pollers": 2, "waitTimeSeconds": 1, "visibilityTimeoutSeconds": 5})
        );
        assert_eq!(
            tree["spec"]["scaling"],
            json!({"minReplicas": 2, "maxReplicas": 2, "pollIntervalSeconds": 1})
        );
        assert_eq!(
            tree["spec"]["sinks"][0]["http"],
            json!({"url": "http://127.0.0.1:9/", "timeoutMs": 2000})
        );
        assert!(tree["spec"].get("delivery").is_none(), "an unset section is not written: {yaml}");
    }

    #[test]
    fn a_bare_source_has_only_what_is_set() {
        let yaml = SourceYaml::bare("bench", "http://127.0.0.1:4566/queue/q", "http://127.0.0.1:4566")
            .exactly_once(2)
            .sink("out", Sink::s3("b", "bench/", "http://127.0.0.1:4566"))
            .yaml();
        let tree: Value = serde_yaml::from_str(&yaml).unwrap();
        assert!(tree["metadata"].get("namespace").is_none());
        for section in ["receive", "scaling", "reader"] {
            assert!(tree["spec"].get(section).is_none(), "{section} written: {yaml}");
        }
        assert_eq!(
            tree["spec"]["delivery"],
            json!({"guarantee": "exactlyOnce", "checkpointIntervalSeconds": 2})
        );
    }

    #[test]
    #[should_panic(expected = "does not parse")]
    fn a_misspelt_field_is_refused_where_the_source_is_built() {
        let mut source = SourceYaml::new("x", "http://127.0.0.1:4566/queue/q", "http://127.0.0.1:4566");
        source.doc["spec"]["receive"]["pollersPerPod"] = json!(2);
        source.yaml();
    }
}
