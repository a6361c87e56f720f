use super::*;
use crate::fixtures;

fn reasons(yaml: &str, image: Option<&str>) -> Vec<&'static str> {
    let source = fixtures::source(yaml);
    match validate(&source, image) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(|p| p.reason).collect(),
    }
}

#[test]
fn valid_fixtures_pass_and_resolve_the_image() {
    for yaml in [fixtures::BASIC, fixtures::EXACTLY_ONCE_SECRET, fixtures::ASSUME_ROLE] {
        let source = fixtures::source(yaml);
        let valid = validate(&source, Some("sluice:default")).map_err(|p| summarize(&p));
        assert!(valid.is_ok(), "{valid:?}");
    }
    let source = fixtures::source(fixtures::EXACTLY_ONCE_SECRET);
    let Ok(valid) = validate(&source, Some("sluice:default")) else { panic!("valid fixture rejected") };
    assert_eq!(valid.image, "registry.example/sluice:1.2.3");
    assert_eq!(valid.name, "payments");
    assert_eq!(valid.namespace, "shop");
}

#[test]
fn every_problem_of_the_invalid_fixture_is_reported() {
    let got = reasons(fixtures::INVALID, Some("img"));
    for want in [
        "QueueRefIncomplete",
        "CredentialsIncomplete",
        "CheckpointIntervalMissing",
        "NoSinks",
        "ScalingInvalid",
    ] {
        assert!(got.contains(&want), "{want} missing from {got:?}");
    }
}

#[test]
fn missing_image_is_a_problem_only_without_a_default() {
    assert_eq!(reasons(fixtures::BASIC, None), vec!["ReaderImageMissing"]);
    assert!(reasons(fixtures::BASIC, Some("img")).is_empty());
    assert_eq!(reasons(fixtures::BASIC, Some("  ")), vec!["ReaderImageMissing"]);
}

#[test]
fn an_http_batch_out_of_bounds_is_one_problem_naming_its_field() {
    let mut source = fixtures::source(fixtures::BASIC);
    let sink: sluice_crds::SinkSpec = serde_json::from_value(serde_json::json!({
        "name": "webhook",
        "http": { "url": "http://127.0.0.1:8080/events", "batch": { "maxEvents": 101 } },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    source.spec.sinks = vec![sink];
    let Err(problems) = validate(&source, Some("img")) else { panic!("maxEvents 101 accepted") };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].field, "spec.sinks[0].http.batch.maxEvents");
    assert_eq!(problems[0].message, "spec.sinks[0].http.batch.maxEvents: must be <= 100 (got 101)");
}

#[test]
fn each_class_of_mistake_has_its_reason_and_a_message_naming_the_field() {
    type Edit = fn(&mut SqsSource);
    let cases: Vec<(&str, Edit)> = vec![
        ("NoQueues", |s| s.spec.queues.clear()),
        ("QueueRefAmbiguous", |s| s.spec.queues[0].name = Some("orders".into())),
        ("QueueUrlInvalid", |s| s.spec.queues[0].url = Some("ftp://x/y".into())),
        ("QueueNameInvalid", |s| {
            s.spec.queues[0].url = None;
            s.spec.queues[0].name = Some("bad name!".into());
            s.spec.queues[0].region = Some("us-east-1".into());
        }),
        ("EndpointInvalid", |s| s.spec.queues[0].endpoint = Some("localhost:4566".into())),
        ("QueueWeightInvalid", |s| s.spec.queues[0].weight = 0),
        ("CredentialsIncomplete", |s| {
            s.spec.credentials.source = CredentialSource::AssumeRole;
        }),
        ("RoleArnInvalid", |s| {
            s.spec.credentials.source = CredentialSource::AssumeRole;
            s.spec.credentials.role_arn = Some("sluice".into());
        }),
        ("CredentialsInconsistent", |s| {
            s.spec.credentials.role_arn = Some("arn:aws:iam::1:role/x".into());
        }),
        ("ReceiveOutOfRange", |s| s.spec.receive.max_messages = 11),
        ("ReceiveOutOfRange", |s| s.spec.receive.visibility_timeout_seconds = Some(-1)),
        ("CheckpointIntervalOutOfRange", |s| {
            s.spec.delivery.checkpoint_interval_seconds = Some(0);
        }),
        ("RetryInvalid", |s| s.spec.delivery.retry.max_attempts = 0),
        ("SinkKindInvalid", |s| s.spec.sinks[0].log = None),
        ("SinkNameDuplicate", |s| {
            let again = s.spec.sinks[0].clone();
            s.spec.sinks.push(again);
        }),
        ("SinkS3PlaceDuplicate", |s| {
            let s3 = sluice_crds::S3SinkSpec {
                bucket: "out".into(),
                prefix: "a/".into(),
                endpoint: None,
                region: None,
                sse_kms_key_id: None,
                buffer: sluice_crds::S3BufferSpec::default(),
                compression: sluice_crds::S3Compression::None,
                key_template: String::new(),
                key_time: sluice_crds::S3KeyTime::SentTimestamp,
            };
            let mut first = s.spec.sinks[0].clone();
            (first.log, first.s3, first.name) = (None, Some(s3.clone()), "one".into());
            let mut second = first.clone();
            (second.s3, second.name) =
                (Some(sluice_crds::S3SinkSpec { prefix: "/a".into(), ..s3 }), "two".into());
            s.spec.sinks = vec![first, second];
        }),
        ("SinkS3KeyTemplateInvalid", |s| {
            let sink: sluice_crds::SinkSpec = serde_json::from_value(serde_json::json!({
                "name": "archive", "s3": {"bucket": "out", "keyTemplate": "dt={yyyy}-{mm}"}
            }))
            .expect("an s3 sink");
            s.spec.sinks = vec![sink];
        }),
        ("SinkRouteInvalid", |s| {
            s.spec.sinks[0].route = Some(sluice_crds::RouteSpec { attribute: "kind".into(), values: vec![] });
        }),
        ("ScalingInvalid", |s| s.spec.scaling.max_replicas = 0),
        ("FilterInvalid", |s| s.spec.filter = Some(filter("atributes.kind == 'a'", None))),
        ("FilterInvalid", |s| s.spec.filter = Some(filter("attributes.kind == 'a'", Some("nowhere")))),
        ("NameTooLong", |s| s.metadata.name = Some("x".repeat(64))),
        // Caught only by the CRD schema and CEL rules, which the reader applies too.
        ("SchemaViolated", |s| s.spec.delivery.retry.max_attempts = 101),
        ("RuleViolated", |s| {
            s.spec.rate_limit = Some(sluice_crds::RateLimitSpec {
                messages_per_second: None,
                bytes_per_second: None,
                burst_seconds: None,
            });
        }),
    ];
    for (want, edit) in cases {
        let mut source = fixtures::source(fixtures::BASIC);
        edit(&mut source);
        let Err(problems) = validate(&source, Some("img")) else {
            panic!("{want}: accepted");
        };
        let problem = problems.iter().find(|p| p.reason == want);
        let Some(problem) = problem else {
            panic!("{want}: got {problems:?}");
        };
        assert!(
            problem.message.contains(problem.field.split('.').next_back().unwrap_or_default())
                || problem.message.contains(&problem.field),
            "{want}: message {:?} does not name {}",
            problem.message,
            problem.field
        );
    }
}

/// Adds an sqs sink and an sqs dead-letter sink, both to `url`.
fn forward(s: &mut SqsSource, url: &str, endpoint: Option<&str>) {
    let sink: sluice_crds::SinkSpec = serde_json::from_value(serde_json::json!({
        "name": "forward",
        "sqs": { "queueUrl": url, "endpoint": endpoint },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    s.spec.sinks.push(sink.clone());
    s.spec.dead_letter_sink = Some(sluice_crds::SinkSpec { name: "dead".into(), ..sink });
}

/// A sink or dead-letter sink that is one of the source's own queues, in each form a user can
/// write it: the same URL (the CEL rule's case too, reported once), a queue given by name and
/// region, another spelling of the URL, and an endpoint override.
#[test]
fn each_self_loop_form_is_refused_naming_the_field() {
    type Edit = fn(&mut SqsSource);
    let cases: Vec<(&str, Edit)> = vec![
        ("same url", |s| forward(s, "https://sqs.us-east-1.amazonaws.com/123456789012/orders", None)),
        ("name and region", |s| {
            s.spec.queues[0].url = None;
            s.spec.queues[0].name = Some("orders".into());
            s.spec.queues[0].region = Some("us-east-1".into());
            forward(s, "https://sqs.us-east-1.amazonaws.com/123456789012/orders", None);
        }),
        ("legacy host", |s| forward(s, "https://queue.amazonaws.com/123456789012/orders", None)),
        ("endpoint override", |s| {
            s.spec.queues[0].url = Some("http://127.0.0.1:4566/queue/us-east-1/000000000000/orders".into());
            s.spec.queues[0].endpoint = Some("http://127.0.0.1:4566".into());
            forward(s, "http://127.0.0.1:4566/000000000000/orders", Some("http://127.0.0.1:4566/"));
        }),
    ];
    for (case, edit) in cases {
        let mut source = fixtures::source(fixtures::BASIC);
        edit(&mut source);
        let Err(problems) = validate(&source, Some("img")) else { panic!("{case}: accepted") };
        let loops: Vec<(&str, &str)> = problems
            .iter()
            .filter(|p| p.message.contains("own queues") || p.reason == "SinkIsSourceQueue")
            .map(|p| (p.reason, p.field.as_str()))
            .collect();
        assert_eq!(
            loops,
            vec![
                ("SinkIsSourceQueue", "spec.sinks[1].sqs.queueUrl"),
                ("SinkIsSourceQueue", "spec.deadLetterSink.sqs.queueUrl")
            ],
            "{case}: {problems:#?}"
        );
        let first = problems.iter().find(|p| p.reason == "SinkIsSourceQueue").map(|p| p.message.clone());
        assert!(
            first.is_some_and(|m| m
                .starts_with("spec.sinks[1].sqs.queueUrl is queue orders of this source (spec.queues[0])")),
            "{case}"
        );
    }
    // Another queue of the same account is fine.
    let mut source = fixtures::source(fixtures::BASIC);
    forward(&mut source, "https://sqs.us-east-1.amazonaws.com/123456789012/orders-out", None);
    assert!(validate(&source, Some("img")).is_ok());
}

fn filter(expression: &str, route_to: Option<&str>) -> sluice_crds::FilterSpec {
    let on_mismatch =
        if route_to.is_some() { sluice_crds::FilterFate::Route } else { sluice_crds::FilterFate::Delete };
    sluice_crds::FilterSpec {
        expression: expression.into(),
        on_mismatch,
        route_to: route_to.map(Into::into),
        release_delay_seconds: None,
        on_error: sluice_crds::FilterErrorFate::default(),
    }
}
