use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::fixtures;
use crate::queue_check::QueueAttributes;

fn deployment(replicas: Option<i32>, ready: i32) -> Deployment {
    let mut d = Deployment {
        spec: Some(DeploymentSpec { replicas, ..DeploymentSpec::default() }),
        status: Some(DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(replicas.unwrap_or(1)),
            ready_replicas: Some(ready),
            updated_replicas: Some(replicas.unwrap_or(1)),
            ..DeploymentStatus::default()
        }),
        ..Deployment::default()
    };
    d.metadata.generation = Some(1);
    d
}

fn found(visible: i64, redrive: bool) -> QueueObservation {
    QueueObservation {
        index: 0,
        label: "orders".into(),
        result: Ok(QueueAttributes {
            url: "u".into(),
            visibility_timeout_seconds: 30,
            redrive_policy: redrive.then(|| {
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:orders-dlq","maxReceiveCount":5}"#
                    .to_owned()
            }),
            maximum_message_size: 1_048_576,
            visible,
            in_flight: 2,
            delayed: 1,
            ..QueueAttributes::default()
        }),
    }
}

fn verdict<'a>(c: &'a Computed, type_: &str) -> &'a Verdict {
    match c.verdicts.iter().find(|v| v.type_ == type_) {
        Some(v) => v,
        None => panic!("no {type_} verdict"),
    }
}

fn summary(c: &Computed, type_: &str) -> (String, String) {
    let v = verdict(c, type_);
    (v.status.to_owned(), v.reason.clone())
}

fn pair(status: &str, reason: &str) -> (String, String) {
    (status.to_owned(), reason.to_owned())
}

#[test]
fn a_healthy_source_is_ready_and_reports_its_queue() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [found(7, true)];
    let d = deployment(Some(2), 2);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, READY), pair("True", "ReadersReady"));
    assert_eq!(summary(&c, QUEUE_REACHABLE), pair("True", "QueueFound"));
    assert_eq!(summary(&c, QUEUE_CONFIG_VALID), pair("True", "QueueConfigValid"));
    assert!(verdict(&c, QUEUE_CONFIG_VALID).message.contains("1048576 bytes"));
    assert_eq!(summary(&c, PROGRESSING), pair("False", "RolloutComplete"));
    assert_eq!(summary(&c, DEGRADED), pair("False", "AsExpected"));
    assert_eq!((c.replicas, c.ready_replicas), (2, 2));
    let q = c.queue.clone().unwrap_or_default();
    assert_eq!((q.visible, q.in_flight, q.delayed), (7, 2, 1));
    assert_eq!(c.last_error, None);
    let redrive = [QueueRedrive {
        queue: "u".into(),
        max_receive_count: Some(5),
        dead_letter_target_arn: Some("arn:aws:sqs:us-east-1:1:orders-dlq".into()),
    }];
    assert_eq!(c.queue_redrive, redrive);
    let status = owned_status(&c, None, Some(1), Timestamp::now());
    assert_eq!(status.queue_redrive, redrive);
}

#[test]
fn max_receive_count_one_is_shown_and_warned_about_while_the_queue_config_stays_valid() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let mut queue = found(0, true);
    if let Ok(attrs) = &mut queue.result {
        attrs.redrive_policy =
            Some(r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":1}"#.into());
    }
    let missing = QueueObservation { index: 1, label: "gone".into(), result: Err(QueueError::DoesNotExist) };
    let no_policy = found(0, false);
    let queues = [queue, missing, no_policy];
    let d = deployment(Some(1), 1);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    let counts: Vec<Option<u32>> = c.queue_redrive.iter().map(|r| r.max_receive_count).collect();
    assert_eq!(counts, [Some(1), None], "one entry per queue that answered; none for one without a policy");
    assert!(c.warnings.iter().any(|w| w.reason == "MaxReceiveCountOne"), "{:?}", c.warnings);
    let previous = owned_status(
        &compute(Outcome::Applied { spec: &spec, queues: &[found(0, true)], targets: &[], deployment: &d }),
        None,
        Some(1),
        Timestamp::now(),
    );
    let next = owned_status(&c, Some(&previous), Some(1), Timestamp::now());
    assert!(differs(Some(&previous), &next), "a changed redrive policy is a status change");
}

#[test]
fn an_invalid_spec_is_degraded_with_the_problems_reason() {
    let problems = vec![Problem {
        reason: "CheckpointIntervalMissing",
        field: "spec.delivery.checkpointIntervalSeconds".into(),
        message: "set it".into(),
    }];
    let c = compute(Outcome::Invalid { problems: &problems });
    assert_eq!(summary(&c, READY), pair("False", "SpecInvalid"));
    assert_eq!(summary(&c, DEGRADED), pair("True", "CheckpointIntervalMissing"));
    assert_eq!(summary(&c, QUEUE_REACHABLE), pair("Unknown", "SpecInvalid"));
    assert_eq!(c.last_error.as_deref(), Some("set it"));
    assert!(c.queue.is_none());
}

#[test]
fn an_unparseable_object_says_so() {
    let c = compute(Outcome::Unparseable { error: "unknown field `foo`" });
    assert_eq!(summary(&c, DEGRADED), pair("True", "SpecUnparseable"));
    assert!(verdict(&c, READY).message.contains("unknown field `foo`"));
}

#[test]
fn a_missing_queue_is_named_in_the_condition() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [QueueObservation {
        index: 0,
        label: "https://sqs.us-east-1.amazonaws.com/123456789012/orders".into(),
        result: Err(QueueError::DoesNotExist),
    }];
    let d = deployment(Some(1), 1);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, QUEUE_REACHABLE), pair("False", "QueueDoesNotExist"));
    assert!(
        verdict(&c, QUEUE_REACHABLE).message.contains("123456789012/orders (spec.queues[0]) does not exist")
    );
    assert_eq!(summary(&c, QUEUE_CONFIG_VALID), pair("Unknown", "QueueNotChecked"));
    assert_eq!(summary(&c, READY), pair("False", "QueueUnreachable"));
    assert_eq!(summary(&c, DEGRADED), pair("True", "QueueDoesNotExist"));
    assert!(c.queue.is_none());
}

#[test]
fn denied_and_unavailable_queues_have_their_own_reasons() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let d = deployment(Some(1), 1);
    for (error, reason) in [
        (QueueError::Denied("AccessDenied".into()), "QueueAccessDenied"),
        (QueueError::Unavailable("timeout".into()), "QueueCheckFailed"),
    ] {
        let queues = [QueueObservation { index: 0, label: "q".into(), result: Err(error) }];
        let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
        assert_eq!(summary(&c, QUEUE_REACHABLE), pair("False", reason));
    }
}

#[test]
fn queue_config_errors_and_warnings() {
    let mut spec = fixtures::source(fixtures::BASIC).spec;
    let d = deployment(Some(1), 1);
    let queues = [found(0, false)];
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, QUEUE_CONFIG_VALID), pair("True", "NoDeadLetter"));
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(summary(&c, READY), pair("True", "ReadersReady"));

    spec.receive.visibility_timeout_seconds = Some(3);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, QUEUE_CONFIG_VALID), pair("False", "VisibilityTimeoutTooShort"));
    assert_eq!(summary(&c, READY), pair("False", "QueueConfigInvalid"));
    assert_eq!(summary(&c, DEGRADED), pair("True", "VisibilityTimeoutTooShort"));
}

#[test]
fn rollouts_scaled_to_zero_and_stuck_rollouts() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [found(0, true)];

    let zero = deployment(Some(0), 0);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &zero });
    assert_eq!(summary(&c, READY), pair("True", "ScaledToZero"));

    // Just created at zero, not yet seen by the Deployment controller: nothing to roll out.
    let mut created = deployment(Some(0), 0);
    created.status = None;
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &created });
    assert_eq!(summary(&c, PROGRESSING), pair("False", "RolloutComplete"));
    assert_eq!(summary(&c, READY), pair("True", "ScaledToZero"));
    // Scaled to zero with readers still running, not yet seen: the old readers are still going.
    let mut stopping = deployment(Some(0), 2);
    if let Some(s) = stopping.status.as_mut() {
        (s.observed_generation, s.replicas, s.updated_replicas) = (Some(1), Some(2), Some(2));
    }
    stopping.metadata.generation = Some(2);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &stopping });
    assert_eq!(summary(&c, PROGRESSING), pair("True", "RollingOut"));

    let mut rolling = deployment(Some(3), 1);
    if let Some(s) = rolling.status.as_mut() {
        s.updated_replicas = Some(1);
    }
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &rolling });
    assert_eq!(summary(&c, PROGRESSING), pair("True", "RollingOut"));
    assert_eq!(summary(&c, DEGRADED), pair("False", "AsExpected"));

    let mut stuck = deployment(Some(1), 0);
    if let Some(s) = stuck.status.as_mut() {
        s.conditions = Some(vec![DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some("ProgressDeadlineExceeded".into()),
            ..DeploymentCondition::default()
        }]);
    }
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &stuck });
    assert_eq!(summary(&c, PROGRESSING), pair("False", "ProgressDeadlineExceeded"));
    assert_eq!(summary(&c, DEGRADED), pair("True", "RolloutStuck"));
    assert_eq!(summary(&c, READY), pair("False", "ReadersNotReady"));
    assert!(verdict(&c, PROGRESSING).is_bad());
}

#[test]
fn transition_times_survive_unchanged_statuses() {
    let t0 = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let t1 = Timestamp::from_second(2_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [found(1, true)];
    let d = deployment(Some(1), 1);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    let first = owned_status(&c, None, Some(1), t0);
    let second = owned_status(&c, Some(&first), Some(1), t1);
    assert!(second.conditions.iter().all(|c| c.last_transition_time == Time(t0)));
    assert!(!differs(Some(&first), &second), "only times changed");
    assert_eq!(second.queue.as_ref().and_then(|q| q.observed_at.clone()), Some(t1.to_string()));

    let problems = vec![Problem { reason: "NoSinks", field: "spec.sinks".into(), message: "add one".into() }];
    let bad = compute(Outcome::Invalid { problems: &problems });
    let third = owned_status(&bad, Some(&second), Some(2), t1);
    let ready = third.conditions.iter().find(|c| c.type_ == READY);
    assert_eq!(ready.map(|c| c.last_transition_time.clone()), Some(Time(t1)));
    assert!(differs(Some(&second), &third));
    assert!(differs(None, &third));
}

#[test]
fn conditions_of_other_managers_do_not_count_as_changes() {
    let t0 = Timestamp::UNIX_EPOCH;
    let spec = fixtures::source(fixtures::BASIC).spec;
    let queues = [found(1, true)];
    let d = deployment(Some(1), 1);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    let mine = owned_status(&c, None, Some(1), t0);
    let mut on_server = mine.clone();
    on_server.conditions.insert(
        0,
        Condition {
            type_: "SinksHealthy".into(),
            status: "True".into(),
            reason: "Delivering".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(t0),
        },
    );
    on_server.desired_replicas = Some(4);
    assert!(!differs(Some(&on_server), &mine));
}

#[test]
fn scaling_and_checkpoint_health_are_always_present_with_a_reason() {
    let queues = [found(1, true)];
    let d = deployment(Some(1), 1);

    let mut spec = fixtures::source(fixtures::BASIC).spec;
    spec.scaling.min_replicas = 2;
    spec.scaling.max_replicas = 2;
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, SCALING), pair("False", "FixedReplicas"));
    assert!(verdict(&c, SCALING).message.contains("raise maxReplicas"));
    assert_eq!(summary(&c, CHECKPOINT_HEALTHY), pair("True", "NotApplicable"));

    spec.scaling.max_replicas = 5;
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &d });
    assert_eq!(summary(&c, SCALING), pair("True", "Autoscaling"));

    // Under exactlyOnce the checkpoint coordinator owns CheckpointHealthy: not written here.
    let exactly = fixtures::source(fixtures::EXACTLY_ONCE_SECRET).spec;
    let c = compute(Outcome::Applied { spec: &exactly, queues: &queues, targets: &[], deployment: &d });
    assert!(c.verdicts.iter().all(|v| v.type_ != CHECKPOINT_HEALTHY));
    assert!(c.verdicts.iter().any(|v| v.type_ == SCALING));

    let problems = [Problem { reason: "NoSinks", field: "spec.sinks".into(), message: "m".into() }];
    let c = compute(Outcome::Invalid { problems: &problems });
    assert_eq!(summary(&c, SCALING), pair("Unknown", "SpecInvalid"));
}

#[test]
fn a_suspended_source_says_so_in_scaling_and_ready() {
    let queues = [found(1, true)];
    let mut spec = fixtures::source(fixtures::BASIC).spec;
    spec.suspend = true;
    let draining = deployment(Some(2), 2);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &draining });
    assert_eq!(summary(&c, SCALING), pair("False", "Suspended"));
    assert!(verdict(&c, SCALING).message.contains("set it to false to resume"));
    let stopped = deployment(Some(0), 0);
    let c = compute(Outcome::Applied { spec: &spec, queues: &queues, targets: &[], deployment: &stopped });
    assert_eq!(summary(&c, READY), pair("True", "Suspended"));
}

#[test]
fn queue_check_failures_read_as_one_line_naming_the_field_and_the_aws_code() {
    let spec = fixtures::source(fixtures::BASIC).spec;
    let d = deployment(Some(1), 1);
    let denied = [QueueObservation {
        index: 0,
        label: "orders".into(),
        result: Err(QueueError::Denied(
            "GetQueueAttributes returned AccessDenied: User arn:aws:sts::1:assumed-role/op is not authorized"
                .into(),
        )),
    }];
    let c = compute(Outcome::Applied { spec: &spec, queues: &denied, targets: &[], deployment: &d });
    let reachable = verdict(&c, QUEUE_REACHABLE);
    assert_eq!(reachable.reason, "QueueAccessDenied");
    assert!(
        reachable
            .message
            .starts_with("queue orders (spec.queues[0]): GetQueueAttributes returned AccessDenied: "),
        "{}",
        reachable.message
    );
    assert!(
        reachable
            .message
            .ends_with("grant the operator's AWS identity sqs:GetQueueAttributes and sqs:GetQueueUrl on it")
    );
    assert_eq!(c.last_error.as_deref(), Some(reachable.message.as_str()));
    assert!(!reachable.message.contains('\n'));
}
