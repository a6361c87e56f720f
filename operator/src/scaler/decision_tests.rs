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
        fleet_drain: 0.0,
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
            // KEDA wakes on the first active reading.
            activation_readings: 1,
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
            fleet_drain: 0.0,
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
    let spec = ScalingSpec {
        min_replicas: 0,
        activation_threshold: 50,
        scale_up_max_step: 4,
        activation_readings: 1,
        ..spec()
    };
    let idle = decide(&spec, &seen(50, 0, 0), History::default());
    assert_eq!((idle.desired, idle.reason), (0, Reason::Idle { backlog: 50, threshold: 50 }));
    let one = decide(&spec, &seen(51, 0, 0), History::default());
    assert_eq!((one.desired, one.reason), (1, Reason::Activated { backlog: 51, threshold: 50, desired: 1 }));
    let burst = decide(&spec, &seen(20_000, 0, 0), History::default());
    assert_eq!(burst.desired, 4, "{}", burst.reason);
    assert_eq!(burst.reason.event_reason(), Some("Activated"));
}

#[test]
fn a_source_at_zero_wakes_on_a_confirmed_reading_only() {
    let spec = ScalingSpec { min_replicas: 0, ..spec() };
    assert_eq!(spec.activation_readings, 2, "the default");
    // A lone non-zero reading of an empty queue: zero stays, and the next empty reading forgets it.
    let spurious = decide(&spec, &seen(3, 0, 0), History::default());
    let confirming = Reason::Confirming { backlog: 3, threshold: 0, readings: 1, needed: 2 };
    assert_eq!((spurious.desired, &spurious.reason), (0, &confirming));
    let empty = decide(&spec, &seen(0, 0, 5), spurious.history);
    assert_eq!((empty.desired, empty.reason), (0, Reason::Idle { backlog: 0, threshold: 0 }));
    let again = decide(&spec, &seen(3, 0, 10), empty.history);
    assert_eq!((again.desired, again.reason), (0, confirming));
    // Confirmed by the next reading: awake, sized by that reading.
    let confirmed = decide(&spec, &seen(500, 0, 15), again.history);
    assert_eq!(confirmed.desired, 5, "{}", confirmed.reason);
    assert_eq!(confirmed.reason.event_reason(), Some("Activated"));
    // activationReadings 1 wakes on the first; above zero nothing waits for a second reading.
    let eager = ScalingSpec { activation_readings: 1, ..spec.clone() };
    assert_eq!(decide(&eager, &seen(3, 0, 0), History::default()).desired, 1);
    assert_eq!(decide(&spec, &seen(500, 1, 0), History::default()).desired, 5);
    // Three readings in a row when asked for.
    let careful = ScalingSpec { activation_readings: 3, ..spec };
    let one = decide(&careful, &seen(3, 0, 0), History::default());
    let two = decide(&careful, &seen(3, 0, 5), one.history);
    let three = decide(&careful, &seen(3, 0, 10), two.history.clone());
    assert_eq!((one.desired, two.desired, three.desired), (0, 0, 1));
}

/// `idleCooldownSeconds` counts from the last reading above the threshold, not from the scale-up:
/// a woken source keeps a reader at least that long after its last activity, however fast the
/// messages went (taken by a slow-starting reader's first receive, or by someone else).
#[test]
fn a_woken_source_keeps_a_reader_for_the_cooldown_after_its_last_activity() {
    let spec = ScalingSpec { min_replicas: 0, idle_cooldown_seconds: 60, ..spec() };
    let first = decide(&spec, &seen(5, 0, 0), History::default());
    let woke = decide(&spec, &seen(5, 0, 5), first.history);
    assert_eq!(woke.desired, 1, "{}", woke.reason);
    let mut history = woke.history;
    for second in (10..65).step_by(5) {
        let decision = decide(&spec, &seen(0, 1, second), history);
        assert_eq!(decision.desired, 1, "at {second}s: {}", decision.reason);
        history = decision.history;
    }
    let decision = decide(&spec, &seen(0, 1, 65), history);
    assert_eq!((decision.desired, decision.reason), (0, Reason::ScaledToZero { idle_seconds: 60 }));
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
        activation_readings: 1,
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

/// A latency target of 10 s with nothing else sizing: depth wants 1, the drain target is off in effect.
fn latency_spec() -> ScalingSpec {
    ScalingSpec {
        target_messages_per_replica: 1_000_000,
        target_drain_seconds: 3600,
        target_latency_seconds: Some(10),
        max_replicas: 20,
        scale_down_stabilization_seconds: 30,
        ..spec()
    }
}

/// A queue fed at a steady rate, read by readers of a fixed capacity, second by second: what the
/// scaler sees lags as it does in a cluster (readers start a few seconds after the Deployment grows,
/// and report their rate and the oldest age they received some seconds late).
struct Feed {
    per_second: i64,
    /// Messages one reader deletes per second at most.
    capacity: i64,
    startup: i64,
    /// Seconds by which the reported age and rates trail the queue.
    report_lag: usize,
    /// Messages already waiting at 0 s, each `preload_age` seconds old.
    preload: i64,
    preload_age: i64,
}

/// (second, replicas) at each poll, and the replicas' reasons at each change.
fn play_feed(spec: &ScalingSpec, feed: &Feed, seconds: i64) -> (Vec<(i64, i32)>, Vec<String>) {
    let poll = i64::from(spec.poll_interval_seconds);
    // Waiting messages, oldest first: (sent at second, count).
    let mut queue = std::collections::VecDeque::from([(-feed.preload_age, feed.preload)]);
    let (mut replicas, mut ready, mut starting) = (1, 1, Vec::<i64>::new());
    // Per second: (age at receive of the oldest taken, fleet drain, per busy reader).
    let mut reports: Vec<(i64, f64, Option<f64>)> = Vec::new();
    let mut history = History::starting_at(at(0), 1);
    let (mut polls, mut reasons) = (Vec::new(), Vec::new());
    for second in 0..seconds {
        queue.push_back((second, feed.per_second));
        ready += starting.iter().filter(|&&t| t == second).count() as i32;
        starting.retain(|&t| t > second);
        let oldest = queue.front().map_or(0, |(sent, _)| second - sent);
        let mut room = i64::from(ready) * feed.capacity;
        let taken_total = room;
        while room > 0
            && let Some((sent, count)) = queue.pop_front()
        {
            let taken = count.min(room);
            room -= taken;
            if taken < count {
                queue.push_front((sent, count - taken));
            }
        }
        let taken = taken_total - room;
        let per_busy = (taken > 0).then(|| taken as f64 / f64::from(ready));
        reports.push((oldest, taken as f64, per_busy));
        if second % poll == 0 && second > 0 {
            let (age, fleet_drain, per) = reports[reports.len().saturating_sub(1 + feed.report_lag)];
            let visible = queue.iter().map(|(_, c)| c).sum();
            let seen = Observation {
                drain_per_replica: per,
                fleet_drain,
                age_seconds: Some(age as f64),
                ..seen(visible, replicas, second)
            };
            let decision = decide(spec, &seen, history);
            history = decision.history;
            if decision.desired > replicas {
                starting.extend((replicas..decision.desired).map(|_| second + feed.startup));
            } else if decision.desired < replicas {
                ready -= replicas - decision.desired;
            }
            if decision.desired != replicas {
                reasons.push(format!("{second}s {replicas} -> {}: {}", decision.desired, decision.reason));
            }
            replicas = decision.desired;
            polls.push((second, replicas));
        }
    }
    (polls, reasons)
}

#[test]
fn a_steady_feed_above_one_readers_rate_settles_at_the_count_the_arrivals_need() {
    // 25 msg/s at 10 msg/s per reader: ceil(25 / (10 x 0.9)) = 3.
    let feed = Feed { per_second: 25, capacity: 10, startup: 3, report_lag: 5, preload: 0, preload_age: 0 };
    let (polls, reasons) = play_feed(&latency_spec(), &feed, 300);
    let peak = polls.iter().map(|(_, r)| *r).max().unwrap_or(0);
    assert!(peak <= 4, "overshot to {peak}: {reasons:#?}");
    let settled: Vec<i32> = polls.iter().filter(|(s, _)| *s >= 120).map(|(_, r)| *r).collect();
    assert!(settled.iter().all(|r| *r == 3), "{settled:?}: {reasons:#?}");
}

#[test]
fn a_burst_clears_then_the_fleet_scales_in_to_what_the_feed_needs() {
    // 15 s of the feed waiting when one reader starts: (25 + 375 / 10) / 9 = 7 to clear it within the
    // target, then 3 once the age is under the target and the stabilization window has passed.
    let feed =
        Feed { per_second: 25, capacity: 10, startup: 3, report_lag: 5, preload: 375, preload_age: 15 };
    let (polls, reasons) = play_feed(&latency_spec(), &feed, 300);
    let peak = polls.iter().map(|(_, r)| *r).max().unwrap_or(0);
    assert!((5..=8).contains(&peak), "peak {peak}: {reasons:#?}");
    let ups: Vec<&String> = reasons.iter().filter(|r| r.contains("msg/s arriving")).collect();
    assert!(!ups.is_empty(), "no decision sized on the arrival rate: {reasons:#?}");
    let settled: Vec<i32> = polls.iter().filter(|(s, _)| *s >= 150).map(|(_, r)| *r).collect();
    assert!(settled.iter().all(|r| *r == 3), "{settled:?}: {reasons:#?}");
    // Up, then only down: no replica added after the first scale-in.
    let first_down = polls.windows(2).position(|w| w[1].1 < w[0].1).expect("scaled in");
    assert!(polls[first_down..].windows(2).all(|w| w[1].1 <= w[0].1), "{reasons:#?}");
}

/// Decides at `second` with `visible` waiting and `current` readers reporting `per` msg/s each.
fn latency_tick(history: History, second: i64, visible: i64, current: i32, per: f64, age: f64) -> Decision {
    decide(&latency_spec(), &reporting(second, visible, current, per, age), history)
}

fn reporting(second: i64, visible: i64, current: i32, per: f64, age: f64) -> Observation {
    Observation {
        drain_per_replica: Some(per),
        fleet_drain: per * f64::from(current),
        age_seconds: Some(age),
        ..seen(visible, current, second)
    }
}

#[test]
fn a_lagging_age_does_not_keep_adding_replicas() {
    // 7 readers at 10 msg/s clear the backlog by 45 msg/s (25 msg/s arrive) while the age they
    // report is still that of the backlog: each interval holds 7, none adds an eighth; once idle
    // moments make the readers' rates read lower, the rate reached under load is kept.
    let mut history = latency_tick(History::starting_at(at(-5), 7), -5, 525, 7, 10.0, 30.0).history;
    let rows: [(i64, i64, f64, f64, f64, i32); 6] = [
        // (second, visible, per-reader rate, fleet drain, reported age, recommended)
        (0, 300, 10.0, 70.0, 30.0, 7),
        (5, 75, 10.0, 70.0, 28.0, 7),
        // The backlog is gone; the age reported still trails it.
        (10, 10, 6.0, 40.0, 24.0, 7),
        (15, 10, 6.0, 25.0, 19.0, 7),
        (20, 10, 6.0, 25.0, 14.0, 7),
        // Under the target: what the arrivals need, ceil((25 + 1) / 9).
        (25, 10, 6.0, 25.0, 2.0, 3),
    ];
    for (second, visible, per, fleet_drain, age, recommended) in rows {
        let seen = Observation { fleet_drain, ..reporting(second, visible, 7, per, age) };
        let decision = decide(&latency_spec(), &seen, history);
        assert_eq!(decision.recommended, recommended, "at {second}s: {}", decision.reason);
        history = decision.history;
    }
}

#[test]
fn over_the_target_and_not_on_track_one_more_is_added() {
    // 5 readers that reached 10 msg/s each under load now drain 20 msg/s between them, holding
    // most of a backlog that does not shrink and is more than they drain within the target: the
    // arrivals and the backlog alone would need 5, and the age says the target is missed.
    let holding = |second, in_flight, per| Observation {
        figures: figures(15, in_flight, 0),
        ..reporting(second, 15, 5, per, 30.0)
    };
    let history = decide(&latency_spec(), &holding(-5, 205, 10.0), History::starting_at(at(-5), 5)).history;
    let history = decide(&latency_spec(), &holding(0, 205, 4.0), history).history;
    let decision = decide(&latency_spec(), &holding(5, 206, 4.0), history);
    assert_eq!(decision.recommended, 6, "{}", decision.reason);
    assert_eq!(
        decision.reason.to_string(),
        "backlog 221 needs 6 replicas (targetLatencySeconds 10, oldest message waited 30.0s: one more, \
         as the readers are not clearing the backlog within the target)"
    );
}

#[test]
fn latency_decisions_name_the_arrival_rate_and_the_per_replica_rate() {
    let history = latency_tick(History::starting_at(at(0), 1), 0, 300, 1, 10.0, 15.0).history;
    let decision = latency_tick(history.clone(), 5, 375, 1, 10.0, 15.0);
    // 10 drained + 15 msg/s growth = 25 arriving; (25 + 37.5) / 9 -> 7.
    assert_eq!(
        decision.reason.to_string(),
        "backlog 375 needs 7 replicas (targetLatencySeconds 10, oldest message waited 15.0s: 25.0 msg/s \
         arriving plus the backlog within the target, at 10.0 msg/s per replica)"
    );
    // No rate measured: one at a time while over the target, nothing asked while under it.
    let blind = |age| Observation { age_seconds: Some(age), ..seen(300, 2, 0) };
    assert_eq!(decide(&latency_spec(), &blind(30.0), History::default()).recommended, 3);
    assert_eq!(decide(&latency_spec(), &blind(5.0), History::default()).recommended, 1);
    // Capped by maxReplicas, the reason still names the rule that asked for more.
    let capped = ScalingSpec { max_replicas: 4, ..latency_spec() };
    let decision = decide(&capped, &reporting(5, 375, 1, 10.0, 15.0), history.clone());
    assert_eq!(
        decision.reason.to_string(),
        "backlog 375 needs 4 replicas (maxReplicas; the targetLatencySeconds asked for 7)"
    );
    // Without a target the age changes nothing.
    let off = ScalingSpec { target_latency_seconds: None, ..latency_spec() };
    assert_eq!(decide(&off, &reporting(5, 375, 1, 10.0, 15.0), history).recommended, 1);
}

#[test]
fn a_binding_source_rate_limit_adds_no_replicas_for_latency() {
    // 3 readers at 10 msg/s under a 30 msg/s limit: the limit, not the count, bounds the drain.
    let limited = |second, visible| Observation {
        drain_per_replica: Some(10.0),
        fleet_drain: 30.0,
        age_seconds: Some(60.0),
        rate_limit: Some(30.0),
        ..seen(visible, 3, second)
    };
    let mut history = History::starting_at(at(0), 3);
    for (second, visible) in [(0, 1000), (5, 1100), (10, 1200)] {
        let decision = decide(&latency_spec(), &limited(second, visible), history);
        assert_eq!(decision.desired, 3, "at {second}s: {}", decision.reason);
        history = decision.history;
    }
    // Well under the limit the same figures do add.
    let unbound = Observation { rate_limit: Some(1000.0), ..limited(15, 1300) };
    assert!(decide(&latency_spec(), &unbound, history).desired > 3);
}
