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
    /// it: 2 pollers with 1 s long polls, the autoscaler polling the queue every second (idle or not:
    /// a suite's burst on a source at zero is seen within a second), reader logs at info. It has no
    /// sink until [`Self::sink`] adds one.
    pub fn new(name: &str, queue_url: &str, endpoint: &str) -> Self {
        let mut source = Self::bare(name, queue_url, endpoint)
            .pollers(2)
            .wait_time(1)
            .poll_interval(1)
            .idle_poll_interval(1);
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

    /// `receive.batchWindowMilliseconds`: how long a poller gathers a batch before handing it on.
    pub fn batch_window(self, ms: u32) -> Self {
        self.set("receive", "batchWindowMilliseconds", ms)
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

    /// `receive.held.horizonMilliseconds`: how far ahead a reader takes work.
    pub fn held_horizon_ms(mut self, ms: u32) -> Self {
        self.doc["spec"]["receive"]["held"]["horizonMilliseconds"] = ms.into();
        self
    }

    /// `delivery.fairness`: `byGroup` or `arrival`.
    pub fn fairness(self, fairness: &str) -> Self {
        self.set("delivery", "fairness", fairness)
    }

    /// `rateLimit.messagesPerSecond` for the whole source.
    pub fn rate_limit(self, messages_per_second: u32) -> Self {
        self.set("rateLimit", "messagesPerSecond", messages_per_second)
    }

    /// `delivery.guarantee: atLeastOnce`, written out.
    pub fn at_least_once(self) -> Self {
        self.guarantee("atLeastOnce")
    }

    /// `delivery.guarantee: exactlyOnce` with a checkpoint every `interval_seconds`.
    pub fn exactly_once(self, interval_seconds: u32) -> Self {
        self.guarantee("exactlyOnce").checkpoint_interval(interval_seconds)
    }

    /// `delivery.guarantee` by its name in the CRD (`atLeastOnce`, `exactlyOnce`).
    pub fn guarantee(self, guarantee: &str) -> Self {
        self.set("delivery", "guarantee", guarantee)
    }

    /// `delivery.checkpointIntervalSeconds`.
    pub fn checkpoint_interval(self, seconds: u32) -> Self {
        self.set("delivery", "checkpointIntervalSeconds", seconds)
    }

    /// Adds a sink named `name` to `spec.sinks`.
    pub fn sink(mut self, name: &str, sink: Sink) -> Self {
        let entry = sink.entry(name);
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

    /// `scaling.idlePollIntervalSeconds`: how often an idle source's queue is read (never faster
    /// than `pollIntervalSeconds`).
    pub fn idle_poll_interval(self, seconds: u64) -> Self {
        self.set("scaling", "idlePollIntervalSeconds", seconds)
    }

    /// `scaling.scaleDownStabilizationSeconds`.
    pub fn scale_down_stabilization(self, seconds: u32) -> Self {
        self.set("scaling", "scaleDownStabilizationSeconds", seconds)
    }

    /// `scaling.scaleUpMaxStep`: the most readers one decision adds.
    pub fn scale_up_max_step(self, step: u32) -> Self {
        self.set("scaling", "scaleUpMaxStep", step)
    }

    /// `scaling.idleCooldownSeconds`.
    pub fn idle_cooldown(self, seconds: u32) -> Self {
        self.set("scaling", "idleCooldownSeconds", seconds)
    }

    /// `scaling.activationReadings`: readings in a row above the threshold that wake a source at
    /// zero.
    pub fn activation_readings(self, readings: u32) -> Self {
        self.set("scaling", "activationReadings", readings)
    }

    /// `scaling.fallback`: what the autoscaler does while it cannot read the queue, e.g.
    /// `json!({"failureThreshold": 2, "behavior": "fixed", "replicas": 2})`.
    pub fn fallback(self, fallback: Value) -> Self {
        self.set("scaling", "fallback", fallback)
    }

    /// `reader.terminationGracePeriodSeconds`.
    pub fn grace_period(self, seconds: u32) -> Self {
        self.set("reader", "terminationGracePeriodSeconds", seconds)
    }

    /// `spec.filter`: `expression`, with `onMismatch: delete`.
    pub fn filter_deleting(self, expression: &str) -> Self {
        self.set("filter", "expression", expression).set("filter", "onMismatch", "delete")
    }

    /// `filter.onMismatch: route` with `filter.routeTo: sink`.
    pub fn filter_routing(self, expression: &str, sink: &str) -> Self {
        self.set("filter", "expression", expression)
            .set("filter", "onMismatch", "route")
            .set("filter", "routeTo", sink)
    }

    /// `filter.onMismatch: release` with `filter.releaseDelaySeconds`.
    pub fn filter_releasing(self, expression: &str, delay_seconds: u32) -> Self {
        self.set("filter", "expression", expression).set("filter", "onMismatch", "release").set(
            "filter",
            "releaseDelaySeconds",
            delay_seconds,
        )
    }

    /// `filter.onError`: the fate of a message the expression fails on (`deadLetter`, `mismatch`).
    pub fn filter_on_error(self, fate: &str) -> Self {
        self.set("filter", "onError", fate)
    }

    /// `reader.logLevel`.
    pub fn log_level(self, level: &str) -> Self {
        self.set("reader", "logLevel", level)
    }

    /// `delivery.retry.maxAttempts`: 1 hands a failed delivery straight to the release backoff.
    pub fn retry_max_attempts(mut self, attempts: u32) -> Self {
        self.doc["spec"]["delivery"]["retry"]["maxAttempts"] = attempts.into();
        self
    }

    /// `delivery.retry` on a fixed schedule without jitter: `attempts` tries `delay_ms` apart.
    pub fn retry_fixed(mut self, attempts: u32, delay_ms: u64) -> Self {
        self.doc["spec"]["delivery"]["retry"] = json!({"strategy": "fixed", "maxAttempts": attempts, "initialDelayMs": delay_ms, "jitter": false});
        self
    }

    /// `delivery.unreadyAfterSeconds`: how long without a delivery before a reader turns unready.
    pub fn unready_after(self, seconds: u32) -> Self {
        self.set("delivery", "unreadyAfterSeconds", seconds)
    }

    /// `delivery.failOnError: true`: the reader exits on a failed delivery instead of retrying.
    pub fn fail_on_error(self) -> Self {
        self.set("delivery", "failOnError", true)
    }

    /// `rateLimit.messagesPerSecond` with `rateLimit.burstSeconds`.
    pub fn rate_limit_burst(self, messages_per_second: u32, burst_seconds: u32) -> Self {
        self.rate_limit(messages_per_second).set("rateLimit", "burstSeconds", burst_seconds)
    }

    /// `payload.format` (`json`, `s3Notification`, ...).
    pub fn payload_format(self, format: &str) -> Self {
        self.set("payload", "format", format)
    }

    /// `payload.s3.endpoint`: where S3 payloads (Extended Client pointers, notified objects) are read.
    pub fn payload_s3(mut self, endpoint: &str) -> Self {
        self.doc["spec"]["payload"]["s3"]["endpoint"] = json!(endpoint);
        self
    }

    /// `payload.s3.region`.
    pub fn payload_region(mut self, region: &str) -> Self {
        self.doc["spec"]["payload"]["s3"]["region"] = json!(region);
        self
    }

    /// `payload.s3.buckets`: the only buckets a pointer may name.
    pub fn payload_buckets(mut self, buckets: &[&str]) -> Self {
        self.doc["spec"]["payload"]["s3"]["buckets"] = json!(buckets);
        self
    }

    /// `payload.streamAboveBytes`.
    pub fn stream_above(self, bytes: usize) -> Self {
        self.set("payload", "streamAboveBytes", bytes)
    }

    /// `payload.extendedClient.deleteObjects: true`.
    pub fn delete_payload_objects(mut self) -> Self {
        self.doc["spec"]["payload"]["extendedClient"]["deleteObjects"] = json!(true);
        self
    }

    /// `spec.deadLetterSink`: the sink named `name` that takes what cannot be delivered.
    pub fn dead_letter(mut self, name: &str, sink: Sink) -> Self {
        self.doc["spec"]["deadLetterSink"] = sink.entry(name);
        self
    }

    /// `spec.replay` as given (a replay request).
    pub fn replay(mut self, replay: Value) -> Self {
        self.doc["spec"]["replay"] = replay;
        self
    }

    /// The first queue without its `endpoint` (the AWS default).
    pub fn without_endpoint(mut self) -> Self {
        if let Some(queue) = self.doc["spec"]["queues"][0].as_object_mut() {
            queue.remove("endpoint");
        }
        self
    }

    /// A field of the first queue set to anything, misspelt names included: for the tests of what
    /// the reader refuses (render those with [`Self::yaml_unchecked`]).
    pub fn queue_field(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.doc["spec"]["queues"][0][field] = value.into();
        self
    }

    /// The manifest as YAML. Panics if it does not parse as an SqsSource: a test built it wrong.
    pub fn yaml(&self) -> String {
        let yaml = self.yaml_unchecked();
        if let Err(e) = serde_yaml::from_str::<SqsSource>(&yaml) {
            panic!("the SqsSource a test built does not parse: {e}\n{yaml}");
        }
        yaml
    }

    /// The manifest as YAML, not checked: only for a test that hands the reader a manifest it must
    /// refuse.
    pub fn yaml_unchecked(&self) -> String {
        serde_yaml::to_string(&self.doc).expect("a JSON tree renders as YAML")
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
        Self::s3_bucket(bucket, endpoint).with("prefix", prefix).with("region", "us-east-1")
    }

    /// An `s3` sink writing to `bucket` at `endpoint`, prefix and region left to their defaults.
    pub fn s3_bucket(bucket: &str, endpoint: &str) -> Self {
        Self::of("s3", json!({"bucket": bucket, "endpoint": endpoint}))
    }

    /// A `log` sink: every message written to the reader's log.
    pub fn log() -> Self {
        Self::of("log", json!({}))
    }

    /// A `log` sink that writes each body too (`body: true`).
    pub fn log_bodies() -> Self {
        Self::of("log", json!({"body": true}))
    }

    /// An `sqs` sink forwarding to `queue_url` at `endpoint`.
    pub fn sqs(queue_url: &str, endpoint: &str) -> Self {
        Self::of("sqs", json!({"queueUrl": queue_url, "endpoint": endpoint}))
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

    /// `batch` of an http sink: up to `max_events` per request, waiting at most `max_wait_ms`.
    pub fn batch(self, max_events: u32, max_wait_ms: u64) -> Self {
        self.with("batch", json!({"maxEvents": max_events, "maxWaitMilliseconds": max_wait_ms}))
    }

    /// `offload.bucket` of an sqs sink: bodies over SQS's limit go to `bucket` (Extended Client).
    pub fn offload(self, bucket: &str) -> Self {
        self.with("offload", json!({"bucket": bucket}))
    }

    /// The `{name, KIND: fields}` entry of a sink list.
    fn entry(self, name: &str) -> Value {
        let mut entry = Map::new();
        entry.insert("name".to_owned(), json!(name));
        entry.insert(self.kind.to_owned(), Value::Object(self.fields));
        if let Some(route) = self.route {
            entry.insert("route".to_owned(), route);
        }
        Value::Object(entry)
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
            json!({"minReplicas": 2, "maxReplicas": 2, "pollIntervalSeconds": 1, "idlePollIntervalSeconds": 1})
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
