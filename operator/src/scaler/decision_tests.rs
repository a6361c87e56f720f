//! Table tests of `decide`: KEDA's formula as a special case, then each rule of our own.

use k8s_openapi::jiff::Timestamp;
use sluice_crds::{QueueFigures, ScalingSpec};

use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("in range")
}

fn figures(visible: i64, in_flight: i64, delayed: i64) -> QueueFigures {
    QueueFigures { visible, in_flight, delayed, observed_at: None }
}

fn seen(visible: i64, current: i32, second: i64) -> Observation {
    Observation {
        figures: figures(visible, 0, 0),
        current,
        drain_per_replica: None,
        age_seconds: None,
        rate_limit: None,
        now: at(second),
    }
}

/// target 100 per replica, 1..=10, step 10, stabilization 60 s, cooldown 60 s, drain target 60 s.
fn spec() -> ScalingSpec {
    ScalingSpec::default()
}

/// One row of KEDA's `aws-sqs-queue` trigger, as its parameters are named.
struct Keda {
    visible: i64,
    in_flight: i64,
    delayed: i64,
    queue_length: i64,
    activation_queue_length: i64,
    scale_on_in_flight: bool,
    scale_on_delayed: bool,
    min_replica_count: i32,
    max_replica_count: i32,
    current: i32,
    expected: i32,
}

impl Keda {
    /// KEDA's parameters mapped onto ours, with everything KEDA lacks switched off: no drain-rate raise
    /// (no rate reported), no stabilization, no step limit, no idle cooldown.
    fn spec(&self) -> ScalingSpec {
        ScalingSpec {
            min_replicas: self.min_replica_count,
            max_replicas: self.max_replica_count,
            target_messages_per_replica: self.queue_length,
            activation_threshold: self.activation_queue_length,
            count_in_flight: self.scale_on_in_flight,
            count_delayed: self.scale_on_delayed,
            scale_up_max_step: i32::MAX,
            scale_down_stabilization_seconds: 0,
            idle_cooldown_seconds: 0,
            ..ScalingSpec::default()
        }
    }
}

/// KEDA's `aws-sqs-queue` scaler, as documented (keda.sh/docs/latest/scalers/aws-sqs) and implemented
/// (kedacore/keda pkg/scalers/aws_sqs_queue_scaler.go):
/// - "actual messages" = ApproximateNumberOfMessages, + ApproximateNumberOfMessagesNotVisible when
///   `scaleOnInFlight` (default true), + ApproximateNumberOfMessagesDelayed when `scaleOnDelayed`
///   (default false);
/// - `queueLength` (default 5) is the target per pod: "if the actual messages in the SQS Queue is 30
///   [and queueLength is 10], the scaler scales to 3 pods", i.e. the HPA's AverageValue target,
///   desired = ceil(metric / queueLength) within [minReplicaCount, maxReplicaCount];
/// - the scaler is active iff metric > `activationQueueLength` (default 0); with minReplicaCount 0 an
///   inactive scaler goes to 0 (after KEDA's cooldownPeriod, 0 here) and an active one to at least 1.
#[test]
fn keda_aws_sqs_queue_formula_is_a_special_case() {
    let row = |visible, in_flight, delayed, queue_length, activation_queue_length| Keda {
        visible,
        in_flight,
        delayed,
        queue_length,
        activation_queue_length,
        scale_on_in_flight: true,
        scale_on_delayed: false,
        min_replica_count: 0,
        max_replica_count: 100,
        current: 1,
        expected: 0,
    };
    let table = [
        // The documentation's example: 30 messages, queueLength 10 -> 3 pods.
        Keda { current: 0, expected: 3, ..row(30, 0, 0, 10, 0) },
        Keda { expected: 3, ..row(30, 0, 0, 10, 0) },
        // scaleOnInFlight defaults to true: in-flight messages count.
        Keda { expected: 3, ..row(20, 10, 0, 10, 0) },
        Keda { scale_on_in_flight: false, expected: 2, ..row(20, 10, 0, 10, 0) },
        // scaleOnDelayed defaults to false.
        Keda { expected: 6, ..row(20, 10, 7, 5, 0) },
        Keda { scale_on_delayed: true, expected: 8, ..row(20, 10, 7, 5, 0) },
        Keda { expected: 0, ..row(0, 0, 7, 5, 0) },
        Keda { scale_on_delayed: true, current: 0, expected: 2, ..row(0, 0, 7, 5, 0) },
        // Ceiling, not rounding: 31 / 10 -> 4; a single message activates one pod.
        Keda { expected: 4, ..row(31, 0, 0, 10, 0) },
        Keda { current: 0, expected: 1, ..row(1, 0, 0, 5, 0) },
        // Empty: inactive, to zero.
        Keda { current: 3, expected: 0, ..row(0, 0, 0, 5, 0) },
        // Activation is strictly greater than activationQueueLength.
        Keda { current: 0, expected: 0, ..row(10, 0, 0, 5, 10) },
        Keda { current: 0, expected: 3, ..row(11, 0, 0, 5, 10) },
        Keda { current: 2, expected: 0, ..row(10, 0, 0, 5, 10) },
        // maxReplicaCount caps; minReplicaCount floors, and with it > 0 the HPA formula applies even
        // below the activation length.
        Keda { max_replica_count: 10, expected: 10, ..row(1000, 0, 0, 5, 0) },
        Keda { min_replica_count: 2, current: 2, expected: 2, ..row(0, 0, 0, 5, 0) },
        Keda { min_replica_count: 1, expected: 2, ..row(10, 0, 0, 5, 20) },
        // In-flight messages alone keep pods alive (a pod is still working on them).
        Keda { current: 2, expected: 1, ..row(0, 4, 0, 5, 0) },
    ];
    for (i, k) in table.iter().enumerate() {
        let observation = Observation {
            figures: figures(k.visible, k.in_flight, k.delayed),
            current: k.current,
            drain_per_replica: None,
            age_seconds: None,
            rate_limit: None,
            now: at(0),
        };
        let decision = decide(&k.spec(), &observation, History::default());
        assert_eq!(decision.desired, k.expected, "row {i}: {}", decision.reason);
    }
}

#[test]
fn backlog_counts_what_the_spec_says() {
    let all = figures(10, 20, 40);
    let spec_with = |count_in_flight, count_delayed| ScalingSpec { count_in_flight, count_delayed, ..spec() };
    assert_eq!(backlog(&spec_with(false, false), &all), 10);
    assert_eq!(backlog(&spec_with(true, false), &all), 30);
    assert_eq!(backlog(&spec_with(false, true), &all), 50);
    assert_eq!(backlog(&spec_with(true, true), &all), 70);
    // SQS figures are approximate; a negative one never reduces the backlog.
    assert_eq!(backlog(&spec_with(true, true), &figures(10, -3, 0)), 10);
    assert_eq!(backlog(&spec(), &figures(i64::MAX, i64::MAX, 0)), i64::MAX);
}

#[test]
fn drain_rate_raises_when_readers_are_too_slow() {
    // 6000 messages at 1000 per replica need 6; at 10 msg/s per replica and 60 s they need 10.
    let base = ScalingSpec { target_messages_per_replica: 1000, max_replicas: 50, ..spec() };
    let cases: [(Option<f64>, i32, i32); 7] = [
        (None, 6, 6),
        (Some(10.0), 10, 10),
        (Some(1000.0), 6, 6),
        (Some(0.0), 6, 6),
        (Some(f64::NAN), 6, 6),
        (Some(-5.0), 6, 6),
        // So slow that it wants more than maxReplicas: capped.
        (Some(0.001), 50, 16),
    ];
    for (rate, recommended, desired) in cases {
        let observation = Observation { drain_per_replica: rate, ..seen(6000, 6, 0) };
        let decision = decide(&base, &observation, History::default());
        assert_eq!(decision.recommended, recommended, "rate {rate:?}: {}", decision.reason);
        assert_eq!(decision.desired, desired, "rate {rate:?}: {}", decision.reason);
    }
    // A source-wide limit of 60 msg/s that the 6 replicas already drain at: more replicas would
    // only split it, so the backlog alone sizes the fleet. Below the limit the raise still applies.
    let bound = Observation { drain_per_replica: Some(10.0), rate_limit: Some(60.0), ..seen(6000, 6, 0) };
    assert_eq!(decide(&base, &bound, History::default()).recommended, 6);
    let unbound = Observation { drain_per_replica: Some(10.0), rate_limit: Some(1000.0), ..seen(6000, 6, 0) };
    assert_eq!(decide(&base, &unbound, History::default()).recommended, 10);
    let observation = Observation { drain_per_replica: Some(10.0), ..seen(6000, 6, 0) };
    let decision = decide(&base, &observation, History::default());
    assert_eq!(
        decision.reason,
        Reason::ScaledUp {
            backlog: 6000,
            recommended: 10,
            basis: Basis::DrainRate { per_replica_per_second: 10.0, drain_seconds: 60 },
            step_limited: false,
        }
    );
    // targetDrainSeconds 0 switches the raise off.
    let off = ScalingSpec { target_drain_seconds: 0, ..base };
    assert_eq!(decide(&off, &observation, History::default()).desired, 6);
}

#[test]
fn a_latency_target_adds_replicas_while_the_age_is_above_it_and_holds_them_while_they_are_needed() {
    // 600 messages, depth alone wants 1 (per replica 1000); drain target off in effect (3600 s).
    let base = ScalingSpec {
        target_messages_per_replica: 1000,
        target_drain_seconds: 3600,
        target_latency_seconds: Some(10),
        max_replicas: 20,
        ..spec()
    };
    let at_age = |age: Option<f64>, rate: Option<f64>, current: i32| Observation {
        age_seconds: age,
        drain_per_replica: rate,
        ..seen(600, current, 0)
    };
    // (age, rate, current, recommended): 600 / (10 msg/s x 10 s) = 6 whatever the age; above the
    // target at least one more than running; no rate: one more at a time.
    let cases: [(Option<f64>, Option<f64>, i32, i32); 6] = [
        (Some(30.0), Some(10.0), 2, 6),
        (Some(30.0), Some(10.0), 6, 7),
        (Some(5.0), Some(10.0), 8, 6),
        (Some(30.0), None, 2, 3),
        (None, None, 2, 1),
        (Some(5.0), Some(100.0), 3, 1),
    ];
    for (age, rate, current, recommended) in cases {
        let decision = decide(&base, &at_age(age, rate, current), History::default());
        assert_eq!(
            decision.recommended, recommended,
            "age {age:?} rate {rate:?} at {current}: {}",
            decision.reason
        );
    }
    let decision = decide(&base, &at_age(Some(30.0), Some(10.0), 2), History::default());
    assert_eq!(
        decision.reason.to_string(),
        "backlog 600 needs 6 replicas (oldest message waited 30.0s against targetLatencySeconds 10)"
    );
    // Capped by maxReplicas, the reason still names the rule that asked for more.
    let capped = ScalingSpec { max_replicas: 4, ..base };
    let decision = decide(&capped, &at_age(Some(30.0), Some(10.0), 2), History::default());
    assert_eq!(
        decision.reason.to_string(),
        "backlog 600 needs 4 replicas (maxReplicas; the targetLatencySeconds asked for 6)"
    );
    // Without a target the age changes nothing.
    let off = ScalingSpec { target_latency_seconds: None, ..base };
    assert_eq!(decide(&off, &at_age(Some(30.0), Some(10.0), 2), History::default()).recommended, 1);
}

#[test]
fn scale_up_is_immediate_but_step_limited() {
    let spec = ScalingSpec { max_replicas: 100, scale_up_max_step: 10, ..spec() };
    // (backlog, current, desired, step_limited)
    let cases = [(5000, 2, 12, true), (1100, 2, 11, false), (1300, 5, 13, false), (100_000, 95, 100, false)];
    for (backlog, current, desired, step_limited) in cases {
        let decision = decide(&spec, &seen(backlog, current, 0), History::default());
        assert_eq!(decision.desired, desired, "{backlog} at {current}: {}", decision.reason);
        assert!(
            matches!(decision.reason, Reason::ScaledUp { step_limited: s, .. } if s == step_limited),
            "{backlog} at {current}: {:?}",
            decision.reason
        );
    }
}

#[test]
fn activation_from_zero_respects_threshold_and_step() {
    let spec = ScalingSpec { min_replicas: 0, activation_threshold: 50, scale_up_max_step: 4, ..spec() };
    let idle = decide(&spec, &seen(50, 0, 0), History::default());
    assert_eq!((idle.desired, idle.reason), (0, Reason::Idle { backlog: 50, threshold: 50 }));
    let one = decide(&spec, &seen(51, 0, 0), History::default());
    assert_eq!((one.desired, one.reason), (1, Reason::Activated { backlog: 51, threshold: 50, desired: 1 }));
    let burst = decide(&spec, &seen(20_000, 0, 0), History::default());
    assert_eq!(burst.desired, 4, "{}", burst.reason);
    assert_eq!(burst.reason.event_reason(), Some("Activated"));
}

#[test]
fn bounds_apply_at_once() {
    // maxReplicas lowered below the current count: down now, whatever the window remembers.
    let history = History::default().record(at(0), 20, 60);
    let lowered = ScalingSpec { max_replicas: 10, ..spec() };
    let decision = decide(&lowered, &seen(100_000, 20, 5), history);
    assert_eq!((decision.desired, decision.reason.event_reason()), (10, Some("ScaledDown")));
    // minReplicas raised: up now, not step-limited.
    let raised = ScalingSpec { min_replicas: 8, scale_up_max_step: 2, ..spec() };
    let decision = decide(&raised, &seen(0, 1, 0), History::default());
    assert_eq!(decision.desired, 8);
    assert!(
        matches!(decision.reason, Reason::ScaledUp { basis: Basis::MinReplicas, .. }),
        "{:?}",
        decision.reason
    );
    // Nonsense bounds (max < min) cannot produce a count outside [min, min].
    let inverted = ScalingSpec { min_replicas: 3, max_replicas: 1, ..spec() };
    assert_eq!(decide(&inverted, &seen(100_000, 3, 0), History::default()).desired, 3);
}

#[test]
fn scale_down_waits_for_the_stabilization_window() {
    let spec = ScalingSpec { scale_down_stabilization_seconds: 60, ..spec() };
    // (second, backlog, expected desired, expected event reason)
    let steps = [
        (0, 1000, 10, Some("ScaledUp")),
        (10, 100, 10, None),
        (30, 300, 10, None),
        (59, 0, 10, None),
        // The 10 recorded at 0 s has left the window; the highest left is 3 (at 30 s).
        (60, 100, 3, Some("ScaledDown")),
        (89, 100, 3, None),
        (90, 100, 1, Some("ScaledDown")),
        // Up is never held by the window.
        (95, 800, 8, Some("ScaledUp")),
    ];
    let mut current = 1;
    let mut history = History::default();
    for (second, backlog, desired, event) in steps {
        let decision = decide(&spec, &seen(backlog, current, second), history);
        assert_eq!(decision.desired, desired, "at {second}s: {}", decision.reason);
        assert_eq!(decision.reason.event_reason(), event, "at {second}s: {}", decision.reason);
        if second == 10 {
            assert_eq!(decision.reason, Reason::Stabilizing { recommended: 1, highest_in_window: 10 });
        }
        current = decision.desired;
        history = decision.history;
    }
}

#[test]
fn scale_to_zero_after_idle_cooldown() {
    let spec = ScalingSpec {
        min_replicas: 0,
        idle_cooldown_seconds: 60,
        scale_down_stabilization_seconds: 30,
        ..spec()
    };
    // (second, backlog, expected desired, expected reason kind)
    let steps: [(i64, i64, i32, &str); 8] = [
        (0, 500, 5, "Activated"),
        (10, 0, 5, "CoolingDown"),
        // The 5 from 0 s left the 30 s window; at least one replica stays until the cooldown ends.
        (45, 0, 1, "ScaledDown"),
        // Idle since the backlog was last seen at 0 s.
        (59, 0, 1, "CoolingDown"),
        (60, 0, 0, "ScaledToZero"),
        (75, 0, 0, "Idle"),
        (80, 250, 3, "Activated"),
        (81, 0, 3, "CoolingDown"),
    ];
    let mut current = 0;
    let mut history = History::default();
    for (second, backlog, desired, kind) in steps {
        let decision = decide(&spec, &seen(backlog, current, second), history);
        assert_eq!(decision.desired, desired, "at {second}s: {}", decision.reason);
        let actual = format!("{:?}", decision.reason);
        assert!(actual.starts_with(kind), "at {second}s: expected {kind}, got {actual}");
        current = decision.desired;
        history = decision.history;
    }
}

#[test]
fn activity_restarts_the_cooldown() {
    let spec = ScalingSpec { min_replicas: 0, idle_cooldown_seconds: 60, ..spec() };
    let history = decide(&spec, &seen(10, 1, 0), History::default()).history;
    let history = decide(&spec, &seen(0, 1, 50), history).history;
    let history = decide(&spec, &seen(1, 1, 55), history).history;
    let decision = decide(&spec, &seen(0, 1, 100), history);
    assert_eq!(decision.desired, 1);
    assert_eq!(decision.reason, Reason::CoolingDown { idle_seconds: 45, cooldown_seconds: 60 });
}

#[test]
fn a_restarted_scaler_does_not_zero_at_once() {
    let spec = ScalingSpec { min_replicas: 0, idle_cooldown_seconds: 60, ..spec() };
    let fresh = decide(&spec, &seen(0, 3, 0), History::starting_at(at(0), 3));
    assert_eq!(fresh.desired, 3, "{}", fresh.reason);
    // Nor does it scale down before a window has passed since it started.
    let busy =
        decide(&ScalingSpec { min_replicas: 1, ..spec }, &seen(100, 3, 59), History::starting_at(at(0), 3));
    assert_eq!(busy.desired, 3, "{}", busy.reason);
    let never_active = decide(&spec, &seen(0, 3, 0), History::default());
    assert_eq!(never_active.desired, 0, "{}", never_active.reason);
}

#[test]
fn in_flight_work_keeps_readers_alive() {
    let spec = ScalingSpec { min_replicas: 0, idle_cooldown_seconds: 0, ..spec() };
    let working = Observation { figures: figures(0, 5, 0), ..seen(0, 2, 0) };
    let decision = decide(&spec, &working, History::default());
    assert_eq!(decision.desired, 1, "{}", decision.reason);
    let not_counted = ScalingSpec { count_in_flight: false, ..spec };
    assert_eq!(decide(&not_counted, &working, History::default()).desired, 0);
}

#[test]
fn steady_when_the_count_is_right() {
    let decision = decide(&spec(), &seen(450, 5, 0), History::default());
    assert!(!decision.changes(5));
    assert_eq!((decision.desired, decision.reason), (5, Reason::Steady { backlog: 450, recommended: 5 }));
}
