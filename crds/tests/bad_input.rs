//! Bad manifests are rejected with messages that name the field and the rule: unknown fields,
//! wrong types, broken rules, bad YAML, and a wrong envelope. Also the apiserver-like handling of
//! nulls and defaults that a user would otherwise trip over.

mod support;

use serde_json::json;
use sluice_crds::validate::{parse_source_yaml, validate_source_value};
use support::{full, rejected};

const MINIMAL: &str = "\
apiVersion: sluice.dev/v1alpha1
kind: SqsSource
metadata:
  name: demo
spec:
  queues:
    - url: http://127.0.0.1:4566/queue/us-east-1/000000000000/orders
  sinks:
    - name: out
      log: {}
";

fn yaml_error(text: &str) -> String {
    match parse_source_yaml(text) {
        Ok(_) => panic!("expected a rejection of:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_minimal_manifest_is_accepted_with_defaults() {
    let source = parse_source_yaml(MINIMAL).expect("valid");
    assert_eq!(source.metadata.name.as_deref(), Some("demo"));
    assert_eq!((source.spec.receive.max_messages, source.spec.receive.wait_time_seconds), (10, 20));
    assert_eq!(source.spec.scaling.max_replicas, 10);
}

#[test]
fn an_out_of_range_value_is_named_with_its_limit() {
    let text = MINIMAL.replace("spec:\n", "spec:\n  receive:\n    maxMessages: 11\n");
    assert_eq!(yaml_error(&text), "spec.receive.maxMessages: must be <= 10 (got 11)");
}

#[test]
fn a_negative_rate_is_given_one_bound() {
    let text = MINIMAL.replace("spec:\n", "spec:\n  rateLimit:\n    messagesPerSecond: -1\n");
    assert_eq!(yaml_error(&text), "spec.rateLimit.messagesPerSecond: must be >= 1 (got -1)");
}

#[test]
fn the_unready_time_is_bounded_and_defaults_to_a_minute() {
    let source = parse_source_yaml(MINIMAL).expect("valid");
    assert_eq!(source.spec.delivery.unready_after_seconds, 60);
    for (value, bound) in [("0", ">= 1"), ("3601", "<= 3600")] {
        let text =
            MINIMAL.replace("spec:\n", &format!("spec:\n  delivery:\n    unreadyAfterSeconds: {value}\n"));
        assert_eq!(
            yaml_error(&text),
            format!("spec.delivery.unreadyAfterSeconds: must be {bound} (got {value})")
        );
    }
    let text = MINIMAL.replace("spec:\n", "spec:\n  delivery:\n    unreadyAfterSeconds: 5\n");
    assert_eq!(parse_source_yaml(&text).expect("valid").spec.delivery.unready_after_seconds, 5);
}

#[test]
fn http_batch_mode_is_off_by_default_and_its_bounds_are_named() {
    let http = MINIMAL.replace("      log: {}\n", "      http:\n        url: http://127.0.0.1:8080/events\n");
    let source = parse_source_yaml(&http).expect("valid");
    assert_eq!(source.spec.sinks[0].http.as_ref().expect("http").batch, None, "binary mode by default");
    let defaults = parse_source_yaml(&format!("{http}        batch: {{}}\n")).expect("valid");
    let batch = defaults.spec.sinks[0].http.as_ref().and_then(|h| h.batch.clone()).expect("batch");
    assert_eq!((batch.max_events, batch.max_bytes, batch.max_wait_milliseconds), (10, 1 << 20, 50));
    let text = format!("{http}        batch:\n          maxEvents: 101\n");
    assert_eq!(yaml_error(&text), "spec.sinks[0].http.batch.maxEvents: must be <= 100 (got 101)");
    let text = format!("{http}        batch:\n          maxWait: 10\n");
    assert!(yaml_error(&text).starts_with("spec.sinks[0].http.batch.maxWait: unknown field"), "{text}");
}

#[test]
fn an_unknown_field_is_named_with_its_path_and_a_suggestion() {
    let text = MINIMAL.replace("spec:\n", "spec:\n  receive:\n    maxMessage: 5\n");
    let err = yaml_error(&text);
    assert!(err.starts_with("spec.receive.maxMessage: unknown field (did you mean maxMessages?)"), "{err}");
    assert!(
        err.contains("attributeNames, batchWindowMilliseconds, held, maxMessages, messageAttributeNames"),
        "lists the allowed fields: {err}"
    );

    let mut v = full();
    v["spec"]["sinks"][0]["http"]["retries"] = json!(3);
    let err = rejected(&v);
    assert!(err.has_path("spec.sinks[0].http.retries"), "{err}");
}

#[test]
fn a_wrong_type_is_named_with_what_was_expected() {
    let text = MINIMAL.replace("spec:\n", "spec:\n  receive:\n    pollers: four\n");
    assert_eq!(yaml_error(&text), r#"spec.receive.pollers: must be a whole number (got string "four")"#);

    let mut v = full();
    v["spec"]["queues"] = json!({"url": "x"});
    assert_eq!(rejected(&v).to_string(), "spec.queues: must be a list (got a mapping)");

    v = full();
    v["spec"]["delivery"]["guarantee"] = json!("exactly-once");
    assert_eq!(
        rejected(&v).to_string(),
        r#"spec.delivery.guarantee: must be one of atLeastOnce, exactlyOnce (got string "exactly-once")"#
    );

    v = full();
    v["spec"]["receive"]["pollers"] = json!(2.5);
    assert!(rejected(&v).has_path("spec.receive.pollers"));
}

#[test]
fn a_broken_rule_is_named_with_the_field_and_the_fix() {
    let text = MINIMAL.replace("spec:\n", "spec:\n  scaling:\n    minReplicas: 5\n    maxReplicas: 2\n");
    let err = yaml_error(&text);
    assert!(
        err.starts_with(
            "spec.scaling.minReplicas: spec.scaling.minReplicas must be <= spec.scaling.maxReplicas"
        ),
        "{err}"
    );
    assert!(err.contains("lower minReplicas or raise maxReplicas"), "says what to change: {err}");
}

#[test]
fn every_violation_is_reported_not_only_the_first() {
    let mut v = full();
    v["spec"]["receive"]["maxMessages"] = json!(0);
    v["spec"]["receive"]["waitTimeSeconds"] = json!(21);
    v["spec"]["bogus"] = json!(true);
    let err = rejected(&v);
    for path in ["spec.receive.maxMessages", "spec.receive.waitTimeSeconds", "spec.bogus"] {
        assert!(err.has_path(path), "{path} missing from:\n{err}");
    }
    assert_eq!(err.violations().len(), 3, "{err}");

    let mut v = full();
    v["spec"]["scaling"] = json!({"minReplicas": 4, "maxReplicas": 3});
    v["spec"]["rateLimit"] = json!({"burstSeconds": 1});
    let err = rejected(&v);
    assert!(err.has_path("spec.scaling.minReplicas") && err.has_path("spec.rateLimit"), "{err}");
}

#[test]
fn missing_required_fields_are_named() {
    let text = MINIMAL.replace("  sinks:\n    - name: out\n      log: {}\n", "");
    assert_eq!(yaml_error(&text), "spec.sinks: is required: add it");

    let mut v = full();
    v["spec"]["sinks"][0]["http"].as_object_mut().expect("http").remove("url");
    assert_eq!(rejected(&v).to_string(), "spec.sinks[0].http.url: is required: add it");
}

#[test]
fn nulls_behave_as_on_the_apiserver() {
    // A null non-nullable field is pruned, so its default applies...
    let text = MINIMAL.replace("spec:\n", "spec:\n  receive: null\n");
    assert_eq!(parse_source_yaml(&text).expect("receive: null means defaults").spec.receive.pollers, 4);
    // ...or it counts as missing when required.
    let text = MINIMAL.replace("  sinks:\n    - name: out\n      log: {}\n", "  sinks: ~\n");
    assert_eq!(yaml_error(&text), "spec.sinks: is required: add it");
    // A nullable (optional) field may be null.
    let text = MINIMAL.replace("spec:\n", "spec:\n  rateLimit: null\n");
    assert!(parse_source_yaml(&text).expect("rateLimit: null is absent").spec.rate_limit.is_none());
}

#[test]
fn integers_must_fit_their_format() {
    let mut v = full();
    v["status"]["replicas"] = json!(4_294_967_296u64);
    let err = rejected(&v);
    assert!(
        err.to_string().starts_with("status.replicas: must be between -2147483648 and 2147483647"),
        "{err}"
    );
}

#[test]
fn conditions_may_hold_each_type_once() {
    let mut v = full();
    let ready = v["status"]["conditions"][0].clone();
    v["status"]["conditions"].as_array_mut().expect("conditions").push(ready);
    let err = rejected(&v);
    assert!(
        err.to_string().starts_with(r#"status.conditions[1]: duplicate entry with type="Ready""#),
        "{err}"
    );
}

#[test]
fn broken_yaml_and_a_wrong_envelope_are_explained() {
    let err = yaml_error("spec: [unclosed");
    assert!(err.starts_with("not valid YAML:") && err.contains("line"), "{err}");

    let text =
        MINIMAL.replace("sluice.dev/v1alpha1", "sluice.dev/v1").replace("kind: SqsSource", "kind: Source");
    let err = yaml_error(&text);
    assert!(err.contains(r#"apiVersion: must be sluice.dev/v1alpha1 (got "sluice.dev/v1")"#), "{err}");
    assert!(err.contains(r#"kind: must be SqsSource (got "Source")"#), "{err}");

    let text = MINIMAL.replace("  name: demo\n", "  namespace: x\n");
    assert!(yaml_error(&text).starts_with("metadata.name: must be a non-empty string"));
    let text = MINIMAL.replace("  name: demo\n", "  generateName: demo-\n");
    assert!(parse_source_yaml(&text).is_ok(), "a create with generateName has no name yet");

    assert!(validate_source_value(&json!(["not", "a", "mapping"])).is_err());
}

#[test]
fn a_filter_expression_that_cannot_run_is_named_at_apply() {
    let filter = |expression: &str| {
        MINIMAL.replace(
            "spec:\n",
            &format!("spec:\n  filter:\n    expression: \"{expression}\"\n    onMismatch: delete\n"),
        )
    };
    assert_eq!(
        yaml_error(&filter("atributes.kind == 'order'")),
        "spec.filter.expression: uses \"atributes\", which is not a variable of a filter: use attributes, system, messageId or body"
    );
    let err = yaml_error(&filter("attributes.kind == "));
    assert!(err.starts_with("spec.filter.expression: is not a CEL expression: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(parse_source_yaml(&filter("attributes.kind == 'order' && body.total > 100")).is_ok());
    let route = MINIMAL.replace(
        "spec:\n",
        "spec:\n  filter:\n    expression: \"true\"\n    onMismatch: route\n    routeTo: elsewhere\n",
    );
    let err = yaml_error(&route);
    assert!(err.starts_with("spec.filter.routeTo: spec.filter.routeTo names no sink in spec.sinks"), "{err}");
}
