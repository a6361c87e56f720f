use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::conditions::{Outcome, compute, owned_status};
use crate::fixtures;
use crate::queue_check::{QueueAttributes, QueueError, QueueObservation};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};

fn ready_deployment() -> Deployment {
    Deployment {
        spec: Some(DeploymentSpec { replicas: Some(1), ..DeploymentSpec::default() }),
        status: Some(DeploymentStatus {
            replicas: Some(1),
            ready_replicas: Some(1),
            updated_replicas: Some(1),
            ..DeploymentStatus::default()
        }),
        ..Deployment::default()
    }
}

fn applied(result: Result<QueueAttributes, QueueError>) -> Computed {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [QueueObservation { index: 0, label: "orders".into(), result }];
    compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &ready_deployment() })
}

fn healthy() -> Computed {
    applied(Ok(QueueAttributes {
        visibility_timeout_seconds: 30,
        redrive_policy: Some(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":5}"#.into(),
        ),
        ..QueueAttributes::default()
    }))
}

fn reasons(n: &[Notice]) -> Vec<(bool, &str)> {
    n.iter().map(|n| (n.warning, n.reason.as_str())).collect()
}

#[test]
fn first_apply_announces_the_configuration_only() {
    let c = healthy();
    let got = notices(&Happened {
        previous: None,
        generation: Some(1),
        computed: &c,
        problems: &[],
        config_hash: Some("abc"),
    });
    assert_eq!(reasons(&got), vec![(false, "ConfigApplied")]);
    assert!(got[0].note.contains("generation 1") && got[0].note.contains("abc"));
}

#[test]
fn an_unchanged_source_says_nothing() {
    let c = healthy();
    let before = owned_status(&c, None, Some(1), Timestamp::UNIX_EPOCH);
    let got = notices(&Happened {
        previous: Some(&before),
        generation: Some(1),
        computed: &c,
        problems: &[],
        config_hash: Some("abc"),
    });
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn a_spec_change_is_announced_once() {
    let c = healthy();
    let before = owned_status(&c, None, Some(1), Timestamp::UNIX_EPOCH);
    let got = notices(&Happened {
        previous: Some(&before),
        generation: Some(2),
        computed: &c,
        problems: &[],
        config_hash: Some("def"),
    });
    assert_eq!(reasons(&got), vec![(false, "ConfigApplied")]);
}

#[test]
fn each_problem_of_an_invalid_spec_is_a_warning() {
    let problems = vec![
        Problem { reason: "NoSinks", field: "spec.sinks".into(), message: "add a sink".into() },
        Problem { reason: "ScalingInvalid", field: "spec.scaling".into(), message: "fix scaling".into() },
    ];
    let c = compute(Outcome::Invalid { problems: &problems });
    let got = notices(&Happened {
        previous: None,
        generation: Some(1),
        computed: &c,
        problems: &problems,
        config_hash: None,
    });
    assert_eq!(reasons(&got), vec![(true, "NoSinks"), (true, "ScalingInvalid")]);
    let before = owned_status(&c, None, Some(1), Timestamp::UNIX_EPOCH);
    let again = notices(&Happened {
        previous: Some(&before),
        generation: Some(1),
        computed: &c,
        problems: &problems,
        config_hash: None,
    });
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_queue_that_disappears_and_returns() {
    let ok = healthy();
    let ok_status = owned_status(&ok, None, Some(1), Timestamp::UNIX_EPOCH);
    let gone = applied(Err(QueueError::DoesNotExist));
    let got = notices(&Happened {
        previous: Some(&ok_status),
        generation: Some(1),
        computed: &gone,
        problems: &[],
        config_hash: Some("abc"),
    });
    assert_eq!(reasons(&got), vec![(true, "QueueDoesNotExist")]);

    let gone_status = owned_status(&gone, Some(&ok_status), Some(1), Timestamp::UNIX_EPOCH);
    let back = notices(&Happened {
        previous: Some(&gone_status),
        generation: Some(1),
        computed: &ok,
        problems: &[],
        config_hash: Some("abc"),
    });
    assert_eq!(reasons(&back), vec![(false, "QueueFound")]);
}

#[test]
fn a_queue_warning_is_a_warning_event() {
    let ok = healthy();
    let ok_status = owned_status(&ok, None, Some(1), Timestamp::UNIX_EPOCH);
    let no_dlq =
        applied(Ok(QueueAttributes { visibility_timeout_seconds: 30, ..QueueAttributes::default() }));
    let got = notices(&Happened {
        previous: Some(&ok_status),
        generation: Some(1),
        computed: &no_dlq,
        problems: &[],
        config_hash: Some("abc"),
    });
    assert_eq!(reasons(&got), vec![(true, "NoDeadLetter")]);
}

#[test]
fn long_notes_are_cut_at_a_char_boundary() {
    let s = "é".repeat(600);
    let t = truncate(&s, 1000);
    assert!(t.len() <= 1000 + '…'.len_utf8());
    assert!(t.ends_with('…'));
}

#[test]
fn a_weakened_guarantee_is_a_warning_when_it_appears_and_news_when_it_goes() {
    let mut spec = fixtures::source(fixtures::BASIC).spec;
    spec.sinks[0] = serde_json::from_value(
        serde_json::json!({"name": "hook", "http": {"url": "http://hooks.example.com/in"}}),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let queues = [QueueObservation {
        index: 0,
        label: "orders".into(),
        result: Ok(QueueAttributes {
            visibility_timeout_seconds: 30,
            redrive_policy: Some(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":5}"#.into(),
            ),
            ..QueueAttributes::default()
        }),
    }];
    let warned = compute(Outcome::Applied {
        spec: &spec,
        queues: &queues,
        targets: &[],
        deployment: &ready_deployment(),
    });
    let got = notices(&Happened {
        previous: None,
        generation: Some(1),
        computed: &warned,
        problems: &[],
        config_hash: Some("h"),
    });
    assert_eq!(reasons(&got), vec![(false, "ConfigApplied"), (true, "PlainHttpEndpoint")]);
    assert!(
        got[1].note.starts_with("spec.sinks[0].http.url sends to hooks.example.com over plain http"),
        "{}",
        got[1].note
    );

    let before = owned_status(&warned, None, Some(1), Timestamp::UNIX_EPOCH);
    let again = notices(&Happened {
        previous: Some(&before),
        generation: Some(1),
        computed: &warned,
        problems: &[],
        config_hash: Some("h"),
    });
    assert!(again.is_empty(), "said once: {again:?}");

    let fixed = healthy();
    let got = notices(&Happened {
        previous: Some(&before),
        generation: Some(2),
        computed: &fixed,
        problems: &[],
        config_hash: Some("h2"),
    });
    assert_eq!(reasons(&got), vec![(false, "ConfigApplied"), (false, "NoWarnings")]);
}
