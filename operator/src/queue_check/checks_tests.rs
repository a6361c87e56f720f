use super::*;
use crate::fixtures;

fn attrs(fifo: bool, visibility: i64, redrive: bool) -> QueueAttributes {
    QueueAttributes {
        url: "u".into(),
        fifo,
        visibility_timeout_seconds: visibility,
        redrive_policy: redrive.then(|| r#"{"maxReceiveCount":5}"#.to_owned()),
        maximum_message_size: 1_048_576,
        ..QueueAttributes::default()
    }
}

fn reasons(findings: &[Finding]) -> Vec<(&'static str, Severity)> {
    findings.iter().map(|f| (f.reason, f.severity)).collect()
}

#[test]
fn table_of_queue_checks() {
    use Severity::{Error, Warning};
    struct Case {
        name: &'static str,
        fixture: &'static str,
        edit: fn(&mut sluice_crds::SqsSourceSpec),
        attrs: QueueAttributes,
        want: Vec<(&'static str, Severity)>,
    }
    let none: fn(&mut sluice_crds::SqsSourceSpec) = |_| {};
    let cases = vec![
        Case {
            name: "healthy standard queue",
            fixture: fixtures::BASIC,
            edit: none,
            attrs: attrs(false, 30, true),
            want: vec![],
        },
        Case {
            name: "spec names a standard queue, queue is FIFO",
            fixture: fixtures::BASIC,
            edit: none,
            attrs: attrs(true, 30, true),
            want: vec![("FifoMismatch", Error)],
        },
        Case {
            name: "spec names a FIFO queue, queue is standard",
            fixture: fixtures::EXACTLY_ONCE_SECRET,
            edit: none,
            attrs: attrs(false, 30, true),
            want: vec![("FifoMismatch", Error)],
        },
        Case {
            name: "no dead letter anywhere",
            fixture: fixtures::BASIC,
            edit: none,
            attrs: attrs(false, 30, false),
            want: vec![("NoDeadLetter", Warning)],
        },
        Case {
            name: "dead-letter sink instead of a redrive policy",
            fixture: fixtures::ASSUME_ROLE,
            edit: none,
            attrs: attrs(false, 60, false),
            want: vec![],
        },
        Case {
            name: "queue visibility below the slowest http sink",
            fixture: fixtures::ASSUME_ROLE,
            edit: none,
            attrs: attrs(false, 29, false),
            want: vec![("VisibilityTimeoutTooShort", Error)],
        },
        Case {
            name: "exactlyOnce: spec visibility 120 covers 2 x 30 + 10",
            fixture: fixtures::EXACTLY_ONCE_SECRET,
            edit: none,
            attrs: attrs(true, 5, true),
            want: vec![],
        },
        Case {
            name: "exactlyOnce: spec visibility too short for the interval",
            fixture: fixtures::EXACTLY_ONCE_SECRET,
            edit: |s| s.receive.visibility_timeout_seconds = Some(69),
            attrs: attrs(true, 600, true),
            want: vec![("VisibilityTimeoutTooShort", Error)],
        },
        Case {
            name: "everything wrong at once",
            fixture: fixtures::EXACTLY_ONCE_SECRET,
            edit: |s| s.receive.visibility_timeout_seconds = None,
            attrs: attrs(false, 30, false),
            want: vec![
                ("FifoMismatch", Error),
                ("VisibilityTimeoutTooShort", Error),
                ("NoDeadLetter", Warning),
            ],
        },
    ];
    for case in cases {
        let mut spec = fixtures::source(case.fixture).spec;
        (case.edit)(&mut spec);
        let got = check_queue(&spec, 0, "q", &case.attrs);
        assert_eq!(reasons(&got), case.want, "{}", case.name);
    }
}

#[test]
fn visibility_messages_say_which_value_to_raise() {
    let mut spec = fixtures::source(fixtures::EXACTLY_ONCE_SECRET).spec;
    spec.receive.visibility_timeout_seconds = Some(50);
    let got = check_queue(&spec, 0, "payments.fifo", &attrs(true, 600, true));
    assert_eq!(got.len(), 1);
    let message = &got[0].message;
    assert!(message.contains("raise spec.receive.visibilityTimeoutSeconds to at least 70"), "{message}");
    assert!(message.contains("lower spec.delivery.checkpointIntervalSeconds to 20"), "{message}");

    spec.receive.visibility_timeout_seconds = None;
    let got = check_queue(&spec, 0, "payments.fifo", &attrs(true, 30, true));
    assert!(got[0].message.contains("raise the queue's VisibilityTimeout to at least 70"));
}

#[test]
fn required_visibility_per_guarantee() {
    let basic = fixtures::source(fixtures::BASIC).spec;
    assert_eq!(required_visibility(&basic).0, MIN_VISIBILITY_SECONDS);
    let http = fixtures::source(fixtures::ASSUME_ROLE).spec;
    assert_eq!(required_visibility(&http).0, 30);
    let exactly = fixtures::source(fixtures::EXACTLY_ONCE_SECRET).spec;
    assert_eq!(required_visibility(&exactly).0, 70);
}

#[test]
fn an_index_outside_the_spec_finds_nothing() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    assert!(check_queue(&spec, 9, "q", &attrs(true, 0, false)).is_empty());
}

#[test]
fn a_customer_managed_kms_key_names_the_key_and_kms_decrypt() {
    let spec = spec_for_kms();
    let mut encrypted = attrs(false, 60, true);
    encrypted.kms_master_key_id = Some("alias/orders".into());
    let findings = check_queue(&spec, 0, "orders", &encrypted);
    let kms: Vec<&Finding> = findings.iter().filter(|f| f.reason == "QueueEncryptedWithKmsKey").collect();
    assert_eq!(kms.len(), 1);
    assert_eq!(kms[0].severity, Severity::Warning);
    assert!(
        kms[0].message.contains("alias/orders") && kms[0].message.contains("kms:Decrypt"),
        "{}",
        kms[0].message
    );
    assert!(kms[0].message.contains("spec.queues[0]"));
    // The AWS-managed key needs no grant of its own.
    encrypted.kms_master_key_id = Some("alias/aws/sqs".into());
    assert!(
        check_queue(&spec, 0, "orders", &encrypted).iter().all(|f| f.reason != "QueueEncryptedWithKmsKey")
    );
}

fn spec_for_kms() -> sluice_crds::SqsSourceSpec {
    serde_json::from_value(serde_json::json!({
        "queues": [{ "url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders" }],
        "sinks": [{ "name": "log", "log": {} }],
    }))
    .expect("a spec")
}

#[test]
fn max_receive_count_one_is_a_warning_naming_the_dead_letter_queue() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let mut one = attrs(false, 30, true);
    one.redrive_policy =
        Some(r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:orders-dlq","maxReceiveCount":1}"#.into());
    let findings = check_queue(&spec, 0, "orders", &one);
    assert_eq!(reasons(&findings), [("MaxReceiveCountOne", Severity::Warning)]);
    let message = &findings[0].message;
    assert!(
        message.contains("maxReceiveCount 1") && message.contains("arn:aws:sqs:us-east-1:1:orders-dlq"),
        "{message}"
    );
    assert!(message.contains("spec.queues[0]") && message.contains("raise maxReceiveCount"), "{message}");
    one.redrive_policy = Some(r#"{"deadLetterTargetArn":"arn:x","maxReceiveCount":2}"#.into());
    assert!(check_queue(&spec, 0, "orders", &one).is_empty(), "2 receives leave room for one drain or crash");
    one.redrive_policy = Some(r#"{"deadLetterTargetArn":"arn:x"}"#.into());
    assert_eq!(
        reasons(&check_queue(&spec, 0, "orders", &one)),
        [("RedrivePolicyUnreadable", Severity::Warning)]
    );
}
