//! Every CEL rule (`x-kubernetes-validations`) of the CRD, evaluated for real: each case turns
//! the valid fixture into an object the rule accepts and into one it rejects, and the rejection
//! must come from that rule, at the right field path, with a message naming the field. A final
//! check fails if some rule in the schema is never made to fail by a case.

#[path = "cel_cases/reader.rs"]
mod reader_cases;
mod support;

use std::collections::BTreeSet;

use kube::core::cel::{CompilationError, CompiledSchema};
use serde_json::{Value, json};
use sluice_crds::{
    SqsSource,
    validate::{compiled_rules, source_schema, validate_source_value},
};
use support::{LOCALSTACK, full, queue_url};

type Edit = fn(&mut Value);

struct Case {
    /// A piece of the rule's message, naming the field.
    names: &'static str,
    /// Where the violation is reported.
    path: &'static str,
    valid: Edit,
    invalid: Edit,
}

fn spec(v: &mut Value) -> &mut Value {
    &mut v["spec"]
}

/// Exactly-once needs sinks that can take part; keep only the http one.
fn exactly_once_http_only(v: &mut Value) {
    spec(v)["delivery"] = json!({"guarantee": "exactlyOnce", "checkpointIntervalSeconds": 5});
    let web = spec(v)["sinks"][0].clone();
    spec(v)["sinks"] = json!([web]);
}

fn fifo_sink(v: &mut Value) -> &mut Value {
    &mut spec(v)["sinks"][1]["sqs"]
}

fn cases() -> Vec<Case> {
    vec![
        // --- queues ---
        Case {
            names: "exactly one of url or name",
            path: "spec.queues[0]",
            valid: |v| spec(v)["queues"][0] = json!({"name": "orders", "region": "us-east-1"}),
            invalid: |v| spec(v)["queues"][0]["name"] = json!("orders"),
        },
        Case {
            names: "spec.queues[].region is required",
            path: "spec.queues[0].region",
            valid: |v| spec(v)["queues"][0] = json!({"name": "orders", "region": "eu-west-2"}),
            invalid: |v| spec(v)["queues"][0] = json!({"name": "orders"}),
        },
        Case {
            names: "spec.queues[].url must look like",
            path: "spec.queues[0].url",
            valid: |v| {
                spec(v)["queues"][0]["url"] = json!("https://sqs.us-east-1.amazonaws.com/123456789012/orders")
            },
            invalid: |v| spec(v)["queues"][0]["url"] = json!("sqs://orders"),
        },
        Case {
            names: "spec.queues[].name may hold only",
            path: "spec.queues[0].name",
            valid: |v| spec(v)["queues"][0] = json!({"name": "orders_v2-b", "region": "us-east-1"}),
            invalid: |v| spec(v)["queues"][0] = json!({"name": "orders v2", "region": "us-east-1"}),
        },
        Case {
            names: "spec.queues[].region must be an AWS region",
            path: "spec.queues[0].region",
            valid: |v| spec(v)["queues"][0]["region"] = json!("us-gov-west-1"),
            invalid: |v| spec(v)["queues"][0]["region"] = json!("useast1"),
        },
        Case {
            names: "spec.queues[].endpoint must be an http(s) URL",
            path: "spec.queues[0].endpoint",
            valid: |v| spec(v)["queues"][0]["endpoint"] = json!("https://sqs.example.com"),
            invalid: |v| spec(v)["queues"][0]["endpoint"] = json!("http://127.0.0.1:4566/queue"),
        },
        Case {
            names: "spec.queues mixes FIFO queues",
            path: "spec.queues",
            valid: |v| {
                spec(v)["queues"] =
                    json!([{"url": queue_url("a.fifo")}, {"name": "b.fifo", "region": "us-east-1"}])
            },
            invalid: |v| spec(v)["queues"] = json!([{"url": queue_url("a.fifo")}, {"url": queue_url("b")}]),
        },
        // --- credentials ---
        Case {
            names: "spec.credentials.roleArn is required",
            path: "spec.credentials.roleArn",
            valid: |v| {
                spec(v)["credentials"] =
                    json!({"source": "AssumeRole", "roleArn": "arn:aws:iam::123456789012:role/r"})
            },
            invalid: |v| spec(v)["credentials"] = json!({"source": "AssumeRole"}),
        },
        Case {
            names: "spec.credentials.roleArn is only used",
            path: "spec.credentials.roleArn",
            valid: |v| spec(v)["credentials"] = json!({"source": "DefaultChain"}),
            invalid: |v| {
                spec(v)["credentials"] =
                    json!({"source": "DefaultChain", "roleArn": "arn:aws:iam::123456789012:role/r"})
            },
        },
        Case {
            names: "spec.credentials.externalId is only used",
            path: "spec.credentials.externalId",
            valid: |v| spec(v)["credentials"] = json!({"source": "AssumeRole", "roleArn": "arn:aws:iam::123456789012:role/r", "externalId": "xy"}),
            invalid: |v| {
                spec(v)["credentials"] =
                    json!({"source": "Secret", "secretRef": {"name": "aws"}, "externalId": "xy"})
            },
        },
        Case {
            names: "spec.credentials.secretRef is required",
            path: "spec.credentials.secretRef",
            valid: |v| spec(v)["credentials"] = json!({"source": "Secret", "secretRef": {"name": "aws"}}),
            invalid: |v| spec(v)["credentials"] = json!({"source": "Secret"}),
        },
        Case {
            names: "spec.credentials.secretRef is only used",
            path: "spec.credentials.secretRef",
            valid: |v| spec(v)["credentials"] = json!({}),
            invalid: |v| spec(v)["credentials"] = json!({"secretRef": {"name": "aws"}}),
        },
        Case {
            names: "spec.credentials.roleArn must look like",
            path: "spec.credentials.roleArn",
            valid: |v| spec(v)["credentials"]["roleArn"] = json!("arn:aws-cn:iam::123456789012:role/path/r"),
            invalid: |v| spec(v)["credentials"]["roleArn"] = json!("reader-role"),
        },
        // --- rate limit, delivery, retry, scaling ---
        Case {
            names: "spec.rateLimit needs messagesPerSecond or bytesPerSecond",
            path: "spec.rateLimit",
            valid: |v| spec(v)["rateLimit"] = json!({"bytesPerSecond": 1024}),
            invalid: |v| spec(v)["rateLimit"] = json!({"burstSeconds": 3}),
        },
        Case {
            names: "spec.delivery.checkpointIntervalSeconds is required",
            path: "spec.delivery.checkpointIntervalSeconds",
            valid: exactly_once_http_only,
            invalid: |v| {
                exactly_once_http_only(v);
                spec(v)["delivery"] = json!({"guarantee": "exactlyOnce"});
            },
        },
        Case {
            names: "spec.delivery.retry.maxDelayMs must be >= initialDelayMs",
            path: "spec.delivery.retry.maxDelayMs",
            valid: |v| spec(v)["delivery"]["retry"] = json!({"initialDelayMs": 500, "maxDelayMs": 500}),
            invalid: |v| spec(v)["delivery"]["retry"] = json!({"initialDelayMs": 500, "maxDelayMs": 499}),
        },
        Case {
            names: "spec.scaling.minReplicas must be <= spec.scaling.maxReplicas",
            path: "spec.scaling.minReplicas",
            valid: |v| spec(v)["scaling"] = json!({"minReplicas": 3, "maxReplicas": 3}),
            invalid: |v| spec(v)["scaling"] = json!({"minReplicas": 4, "maxReplicas": 3}),
        },
        Case {
            names: "spec.scaling.minReplicas must be <= spec.scaling.maxReplicas",
            path: "spec.scaling.minReplicas",
            valid: |v| spec(v)["scaling"] = json!({"minReplicas": 0, "maxReplicas": 1}),
            invalid: |v| spec(v)["scaling"] = json!({"minReplicas": 11}),
        },
        Case {
            names: "spec.scaling.fallback.replicas is not read with behavior keepCurrent",
            path: "spec.scaling.fallback.replicas",
            valid: |v| spec(v)["scaling"] = json!({"fallback": {"behavior": "keepCurrent"}}),
            invalid: |v| spec(v)["scaling"] = json!({"fallback": {"behavior": "keepCurrent", "replicas": 2}}),
        },
        Case {
            names: "spec.scaling.fallback.replicas is required with behavior fixed",
            path: "spec.scaling.fallback.replicas",
            valid: |v| spec(v)["scaling"] = json!({"fallback": {"behavior": "fixed", "replicas": 0}}),
            invalid: |v| spec(v)["scaling"] = json!({"fallback": {"behavior": "fixed"}}),
        },
        // --- sinks ---
        Case {
            names: "needs exactly one of http, sqs, s3 or log",
            path: "spec.sinks[0]",
            valid: |v| spec(v)["sinks"][0] = json!({"name": "web", "log": {}}),
            invalid: |v| spec(v)["sinks"][0]["log"] = json!({}),
        },
        Case {
            names: "needs exactly one of http, sqs, s3 or log",
            path: "spec.sinks[0]",
            valid: |v| spec(v)["sinks"][0] = json!({"name": "web", "s3": {"bucket": "abc"}}),
            invalid: |v| spec(v)["sinks"][0] = json!({"name": "web"}),
        },
        Case {
            names: "sink name must be a DNS label",
            path: "spec.sinks[0].name",
            valid: |v| spec(v)["sinks"][0]["name"] = json!("web-2"),
            invalid: |v| spec(v)["sinks"][0]["name"] = json!("Web_2"),
        },
        Case {
            names: "spec.sinks[].name must be unique",
            path: "spec.sinks",
            valid: |v| spec(v)["sinks"][1]["name"] = json!("web2"),
            invalid: |v| spec(v)["sinks"][1]["name"] = json!("web"),
        },
        Case {
            names: "spec.sinks[].http.url must be an http:// or https:// URL",
            path: "spec.sinks[0].http.url",
            valid: |v| spec(v)["sinks"][0]["http"]["url"] = json!("https://hooks.example.com/in?x=1"),
            invalid: |v| spec(v)["sinks"][0]["http"]["url"] = json!("hooks.example.com/in"),
        },
        Case {
            names: "spec.sinks[].sqs.messageGroupId applies only to FIFO queues",
            path: "spec.sinks[1].sqs.messageGroupId",
            valid: |v| {
                let sink = fifo_sink(v);
                sink["queueUrl"] = json!(queue_url("copies.fifo"));
                sink["messageGroupId"] = json!("all");
            },
            invalid: |v| fifo_sink(v)["messageGroupId"] = json!("all"),
        },
        Case {
            names: "spec.sinks[].sqs.queueUrl must look like",
            path: "spec.sinks[1].sqs.queueUrl",
            valid: |v| {
                fifo_sink(v)["queueUrl"] = json!("https://sqs.eu-west-1.amazonaws.com/123456789012/copies")
            },
            invalid: |v| fifo_sink(v)["queueUrl"] = json!("https://sqs.eu-west-1.amazonaws.com/"),
        },
        Case {
            names: "spec.sinks[].sqs.endpoint must be an http(s) URL",
            path: "spec.sinks[1].sqs.endpoint",
            valid: |v| fifo_sink(v)["endpoint"] = json!("http://localhost:4566/"),
            invalid: |v| fifo_sink(v)["endpoint"] = json!("localhost:4566"),
        },
        Case {
            names: "spec.sinks[].sqs.region must be an AWS region",
            path: "spec.sinks[1].sqs.region",
            valid: |v| fifo_sink(v)["region"] = json!("ap-southeast-2"),
            invalid: |v| fifo_sink(v)["region"] = json!("Sydney"),
        },
        Case {
            names: "spec.sinks[].s3.bucket must be a valid S3 bucket name",
            path: "spec.sinks[2].s3.bucket",
            valid: |v| spec(v)["sinks"][2]["s3"]["bucket"] = json!("my.bucket-1"),
            invalid: |v| spec(v)["sinks"][2]["s3"]["bucket"] = json!("My_Bucket"),
        },
        Case {
            names: "spec.sinks[].s3.endpoint must be an http(s) URL",
            path: "spec.sinks[2].s3.endpoint",
            valid: |v| spec(v)["sinks"][2]["s3"]["endpoint"] = json!(LOCALSTACK),
            invalid: |v| spec(v)["sinks"][2]["s3"]["endpoint"] = json!("s3://bucket"),
        },
        Case {
            names: "spec.sinks[].s3.region must be an AWS region",
            path: "spec.sinks[2].s3.region",
            valid: |v| spec(v)["sinks"][2]["s3"]["region"] = json!("eu-central-1"),
            invalid: |v| spec(v)["sinks"][2]["s3"]["region"] = json!("eu-central"),
        },
        Case {
            names: "spec.sinks[].s3.keyTemplate must be path segments",
            path: "spec.sinks[2].s3.keyTemplate",
            valid: |v| spec(v)["sinks"][2]["s3"]["keyTemplate"] = json!("{yyyy}/{MM}/{dd}/{HH}"),
            invalid: |v| spec(v)["sinks"][2]["s3"]["keyTemplate"] = json!("{yyyy}/{mm}"),
        },
        Case {
            names: "with spec.delivery.guarantee exactlyOnce every sink in spec.sinks",
            path: "spec.sinks",
            valid: |v| {
                exactly_once_http_only(v);
                let s3 = json!({"name": "archive", "s3": {"bucket": "abc"}});
                let fifo = json!({"name": "fifo", "sqs": {"queueUrl": queue_url("out.fifo")}});
                spec(v)["sinks"].as_array_mut().expect("sinks").extend([s3, fifo]);
            },
            invalid: |v| {
                exactly_once_http_only(v);
                spec(v)["sinks"].as_array_mut().expect("sinks").push(json!({"name": "debug", "log": {}}));
            },
        },
        Case {
            names: "with spec.delivery.guarantee exactlyOnce every sink in spec.sinks",
            path: "spec.sinks",
            valid: exactly_once_http_only,
            invalid: |v| {
                exactly_once_http_only(v);
                let standard = json!({"name": "std", "sqs": {"queueUrl": queue_url("out")}});
                spec(v)["sinks"].as_array_mut().expect("sinks").push(standard);
            },
        },
        // --- dead-letter sink ---
        Case {
            names: "spec.deadLetterSink cannot be s3",
            path: "spec.deadLetterSink.s3",
            valid: |v| {
                spec(v)["deadLetterSink"] = json!({"name": "dead", "http": {"url": "http://127.0.0.1:9/dlq"}})
            },
            invalid: |v| {
                spec(v)["deadLetterSink"] = json!({"name": "dead", "s3": {"bucket": "dead-letters"}})
            },
        },
        Case {
            names: "spec.deadLetterSink takes every poison message, so it cannot have a route",
            path: "spec.deadLetterSink.route",
            valid: |v| spec(v)["deadLetterSink"] = json!({"name": "dead", "log": {"body": true}}),
            invalid: |v| spec(v)["deadLetterSink"]["route"] = json!({"attribute": "kind", "values": ["x"]}),
        },
        Case {
            names: "spec.sinks[].sqs.queueUrl is one of the source's own queues",
            path: "spec.sinks",
            // Same URL through another endpoint is another service's queue.
            valid: |v| spec(v)["sinks"][1]["sqs"] = json!({"queueUrl": queue_url("orders")}),
            invalid: |v| spec(v)["sinks"][1]["sqs"]["queueUrl"] = json!(queue_url("orders")),
        },
        Case {
            names: "spec.deadLetterSink.sqs.queueUrl is one of the source's own queues",
            path: "spec.deadLetterSink.sqs.queueUrl",
            valid: |v| spec(v)["deadLetterSink"]["sqs"]["queueUrl"] = json!(queue_url("orders-dead")),
            invalid: |v| spec(v)["deadLetterSink"]["sqs"]["queueUrl"] = json!(queue_url("orders")),
        },
        Case {
            names: "spec.deadLetterSink.name must differ",
            path: "spec.deadLetterSink.name",
            valid: |v| spec(v)["deadLetterSink"]["name"] = json!("dead-2"),
            invalid: |v| spec(v)["deadLetterSink"]["name"] = json!("archive"),
        },
        // --- filter ---
        Case {
            names: "spec.filter.routeTo names no sink in spec.sinks",
            path: "spec.filter.routeTo",
            valid: |v| {
                spec(v)["filter"] = json!({"expression": "true", "onMismatch": "route", "routeTo": "web"})
            },
            invalid: |v| {
                spec(v)["filter"] = json!({"expression": "true", "onMismatch": "route", "routeTo": "nowhere"})
            },
        },
        Case {
            names: "spec.filter.routeTo names the sink for onMismatch: route, and only for it",
            path: "spec.filter.routeTo",
            valid: |v| spec(v)["filter"] = json!({"expression": "true", "onMismatch": "delete"}),
            invalid: |v| {
                spec(v)["filter"] = json!({"expression": "true", "onMismatch": "delete", "routeTo": "web"})
            },
        },
        Case {
            names: "spec.filter.releaseDelaySeconds applies only to onMismatch: release",
            path: "spec.filter.releaseDelaySeconds",
            valid: |v| {
                spec(v)["filter"] =
                    json!({"expression": "true", "onMismatch": "release", "releaseDelaySeconds": 30})
            },
            invalid: |v| {
                spec(v)["filter"] =
                    json!({"expression": "true", "onMismatch": "delete", "releaseDelaySeconds": 30})
            },
        },
        // --- replay ---
        Case {
            names: "spec.replay.id must be lowercase",
            path: "spec.replay.id",
            valid: |v| spec(v)["replay"] = json!({"id": "after-incident-42"}),
            invalid: |v| spec(v)["replay"] = json!({"id": "After_Incident"}),
        },
        Case {
            names: "spec.replay.deadLetteredAfter is not an RFC 3339 time",
            path: "spec.replay.deadLetteredAfter",
            valid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredAfter": "2026-12-02T13:00:00Z"}),
            invalid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredAfter": "yesterday"}),
        },
        Case {
            names: "spec.replay.deadLetteredBefore is not an RFC 3339 time",
            path: "spec.replay.deadLetteredBefore",
            valid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredBefore": "2026-12-02T13:00:00.5Z"}),
            invalid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredBefore": "2026-12-02 13:00"}),
        },
        Case {
            names: "spec.replay.deadLetteredAfter must be earlier",
            path: "spec.replay.deadLetteredAfter",
            valid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredAfter": "2026-12-02T13:00:00Z", "deadLetteredBefore": "2026-12-02T14:00:00Z"}),
            invalid: |v| spec(v)["replay"] = json!({"id": "r", "deadLetteredAfter": "2026-12-02T14:00:00Z", "deadLetteredBefore": "2026-12-02T13:00:00Z"}),
        },
        // --- payload ---
        Case {
            names: "spec.payload.extendedClient.deleteObjects needs resolve: true",
            path: "spec.payload.extendedClient.deleteObjects",
            valid: |v| spec(v)["payload"]["extendedClient"] = json!({"deleteObjects": true}),
            invalid: |v| {
                spec(v)["payload"]["extendedClient"] = json!({"resolve": false, "deleteObjects": true})
            },
        },
        Case {
            names: "spec.payload.extendedClient.deleteObjects does not apply to format s3Notification",
            path: "spec.payload.extendedClient.deleteObjects",
            valid: |v| spec(v)["payload"]["extendedClient"] = json!({"resolve": false}),
            invalid: |v| {
                spec(v)["payload"]["format"] = json!("s3Notification");
                spec(v)["payload"]["extendedClient"] = json!({"deleteObjects": true});
            },
        },
    ]
}

#[test]
fn every_rule_accepts_its_valid_case_and_rejects_its_invalid_case() {
    let mut failed_rules = BTreeSet::new();
    for case in cases().into_iter().chain(reader_cases::cases()) {
        let mut good = full();
        (case.valid)(&mut good);
        if let Err(e) = validate_source_value(&good) {
            panic!("valid case for \"{}\" was rejected:\n{e}", case.names);
        }

        let mut bad = full();
        (case.invalid)(&mut bad);
        let err = match validate_source_value(&bad) {
            Ok(_) => panic!("invalid case for \"{}\" was accepted", case.names),
            Err(e) => e,
        };
        let hit = err.violations().iter().find(|v| v.rule.is_some() && v.message.contains(case.names));
        let Some(hit) = hit else { panic!("expected the rule \"{}\" to fail, got:\n{err}", case.names) };
        assert_eq!(hit.path, case.path, "\"{}\" reported at the wrong path:\n{err}", case.names);
        assert!(
            err.to_string().lines().any(|l| l.starts_with(case.path) && l.contains(case.names)),
            "the error text should name the field: {err}"
        );
        failed_rules.insert(hit.rule.clone().expect("a CEL violation carries its rule"));
    }

    let mut all_rules = BTreeSet::new();
    collect_rules(source_schema(), &mut all_rules);
    let untested: Vec<_> = all_rules.difference(&failed_rules).collect();
    assert!(untested.is_empty(), "CEL rules no case makes fail: {untested:#?}");
}

fn collect_rules(schema: &Value, out: &mut BTreeSet<String>) {
    for rule in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
        out.insert(rule["rule"].as_str().expect("a rule string").to_owned());
        assert!(
            rule.get("message").and_then(Value::as_str).is_some_and(|m| m.contains(": ")),
            "every rule needs a message saying what to change: {rule}"
        );
    }
    for child in schema.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values()) {
        collect_rules(child, out);
    }
    if let Some(items) = schema.get("items") {
        collect_rules(items, out);
    }
}

fn compilation_errors<'a>(
    node: &'a CompiledSchema,
    path: &str,
    out: &mut Vec<(String, &'a CompilationError)>,
) {
    out.extend(node.compilation_errors().into_iter().map(|e| (path.to_owned(), e)));
    for (name, child) in &node.properties {
        compilation_errors(child, &format!("{path}.{name}"), out);
    }
    if let Some(items) = &node.items {
        compilation_errors(items, &format!("{path}[]"), out);
    }
}

#[test]
fn every_rule_compiles() {
    let mut errors = Vec::new();
    compilation_errors(compiled_rules(), "", &mut errors);
    assert!(errors.is_empty(), "CEL rules that do not compile: {errors:#?}");
}

#[test]
fn the_derived_validate_cel_agrees_with_the_compiled_rules() {
    let mut bad = full();
    spec(&mut bad)["scaling"] = json!({"minReplicas": 4, "maxReplicas": 3});
    let typed: SqsSource = serde_json::from_value(bad.clone()).expect("structurally valid");
    let derived = typed.validate_cel().expect_err("minReplicas > maxReplicas");
    let ours = validate_source_value(&bad).expect_err("minReplicas > maxReplicas");
    let derived: Vec<(String, String)> =
        derived.iter().map(|e| (e.field_path.clone(), e.message.clone())).collect();
    let ours: Vec<(String, String)> =
        ours.violations().iter().map(|v| (v.path.clone(), v.message.clone())).collect();
    assert_eq!(derived, ours);
    let good: SqsSource = serde_json::from_value(full()).expect("valid");
    assert!(good.validate_cel().is_ok());
}

#[test]
fn credential_headers_are_refused_inline_whatever_their_case() {
    let names = ["Authorization", "proxy-authorization", "X-Api-Key", "API-KEY", "x-auth-token", "Cookie"];
    for name in names {
        for (path, place) in
            [("spec.sinks[0].http.headers", "sinks"), ("spec.deadLetterSink.http.headers", "dead")]
        {
            let mut bad = full();
            let http = json!({"url": "http://127.0.0.1:8081/dead", "headers": {name: "secret"}});
            if place == "dead" {
                spec(&mut bad)["deadLetterSink"] = json!({"name": "dead", "http": http});
            } else {
                spec(&mut bad)["sinks"][0]["http"]["headers"][name] = json!("secret");
            }
            let err = support::rejected(&bad);
            let line = err.to_string();
            assert!(
                line.lines().any(|l| l.starts_with(path) && l.contains("secretRefs.headers")),
                "{name} at {path}: expected one line naming the field and secretRefs, got:\n{err}"
            );
        }
    }
    let mut fine = full();
    spec(&mut fine)["sinks"][0]["http"]["headers"] = json!({"X-Authorization-Mode": "none", "X-Team": "a"});
    support::accepted(&fine);
}
