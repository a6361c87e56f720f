//! A sink's circuit breaker, as a pure state machine: when a sink has failed often enough in a
//! row that the reader should stop receiving for it, and when to try it again.
//!
//! Why: while a sink is down, every message received for it can only be held (a sink fault
//! never costs a message a receive), so receiving more only fills the reader and spends SQS
//! calls. After [`OPEN_AFTER`] failed deliveries in a row with no success between, the breaker
//! opens: the pollers stop receiving, and one held delivery at a time probes the sink on a
//! growing interval ([`probe_delay`]: 1 s doubling to 30 s, equal jitter). The first success of
//! any delivery closes it: the held messages are retried at once and receiving resumes.
//!
//! Why five: one failure is noise (a connection reset, one 503 from a rolling deploy); each of
//! the five is a delivery that already ran out the sink's own retries (`delivery.retry`), so five
//! in a row is a sink that stays down, found within seconds.

use std::time::{Duration, Instant};

/// Failed deliveries in a row, with no success between, that open the breaker.
pub const OPEN_AFTER: u32 = 5;
/// The first wait before a probe, doubling after each failed probe up to [`LONGEST_PROBE_DELAY`].
pub const FIRST_PROBE_DELAY: Duration = Duration::from_secs(1);
pub const LONGEST_PROBE_DELAY: Duration = Duration::from_secs(30);

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Deliveries go through as they come.
    Closed,
    /// The sink is down: no receiving for it; the next probe is due at a set time.
    Open,
    /// One probe is out; its answer closes or reopens the breaker.
    HalfOpen,
}

impl State {
    /// The value of the `sink_circuit_state` gauge.
    pub fn gauge(self) -> i64 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }
}

/// One change of state, for the line, the metric and the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: State,
    pub to: State,
    /// Failed deliveries since the last success.
    pub failures: u32,
    /// Probes that failed since the breaker opened.
    pub probes_failed: u32,
}

#[derive(Clone, Debug)]
pub struct Breaker {
    state: State,
    failures: u32,
    probes_failed: u32,
    next_probe: Option<Instant>,
}

impl Default for Breaker {
    fn default() -> Self {
        Self { state: State::Closed, failures: 0, probes_failed: 0, next_probe: None }
    }
}

impl Breaker {
    pub fn state(&self) -> State {
        self.state
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the next probe may start (`None` unless open).
    pub fn next_probe(&self) -> Option<Instant> {
        self.next_probe.filter(|_| self.state == State::Open)
    }

    /// A delivery to the sink succeeded: closed, whatever it was.
    pub fn succeeded(&mut self) -> Option<Transition> {
        let from = self.state;
        let failures = self.failures;
        let probes_failed = self.probes_failed;
        *self = Self::default();
        (from != State::Closed).then_some(Transition { from, to: State::Closed, failures, probes_failed })
    }

    /// A delivery to the sink failed for the sink's fault at `now`; `draw` in [0, 1) jitters the
    /// next probe. Closed: counts, and opens at [`OPEN_AFTER`]. Half-open: the probe failed (or a
    /// delivery that was still out did), so open again with a longer wait. Open: only counts.
    pub fn failed(&mut self, now: Instant, draw: f64) -> Option<Transition> {
        self.failures = self.failures.saturating_add(1);
        let from = self.state;
        match from {
            State::Closed if self.failures < OPEN_AFTER => return None,
            State::Closed => {}
            State::HalfOpen => self.probes_failed = self.probes_failed.saturating_add(1),
            State::Open => return None,
        }
        self.state = State::Open;
        self.next_probe = Some(now + probe_delay(self.probes_failed, draw));
        Some(self.transition(from))
    }

    /// Take the probe if one is due at `now`: open and its time has come. Exactly one caller
    /// gets `Some` per probe (the breaker turns half-open).
    pub fn take_probe(&mut self, now: Instant) -> Option<Transition> {
        let due = self.state == State::Open && self.next_probe.is_some_and(|at| now >= at);
        if !due {
            return None;
        }
        self.state = State::HalfOpen;
        self.next_probe = None;
        Some(self.transition(State::Open))
    }

    /// A probe ended without an answer (its delivery was dropped at a stop): open again, due at
    /// once, so that the next held delivery probes.
    pub fn probe_abandoned(&mut self, now: Instant) {
        if self.state == State::HalfOpen {
            self.state = State::Open;
            self.next_probe = Some(now);
        }
    }

    fn transition(&self, from: State) -> Transition {
        Transition { from, to: self.state, failures: self.failures, probes_failed: self.probes_failed }
    }
}

/// The wait before the next probe after `probes_failed` failed probes: 1 s doubling to 30 s,
/// drawn from [d/2, d] ("equal jitter", as the sinks' own retries) so the readers of one source
/// do not probe in step.
pub fn probe_delay(probes_failed: u32, draw: f64) -> Duration {
    let factor = 1u32.checked_shl(probes_failed).unwrap_or(u32::MAX);
    let delay = FIRST_PROBE_DELAY.saturating_mul(factor).min(LONGEST_PROBE_DELAY);
    let half = delay / 2;
    half + half.mul_f64(draw.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(now: Instant) -> Breaker {
        let mut b = Breaker::default();
        for _ in 1..OPEN_AFTER {
            assert_eq!(b.failed(now, 0.0), None);
        }
        let t = b.failed(now, 0.0).expect("opens");
        assert_eq!((t.from, t.to, t.failures), (State::Closed, State::Open, OPEN_AFTER));
        b
    }

    #[test]
    fn opens_after_failures_in_a_row_and_a_success_between_resets_the_count() {
        let now = Instant::now();
        let mut b = Breaker::default();
        for _ in 1..OPEN_AFTER {
            b.failed(now, 0.0);
        }
        assert_eq!(b.succeeded(), None, "closed stays closed: no transition");
        assert_eq!(b.failed(now, 0.0), None);
        assert_eq!(b.state(), State::Closed);
        let b = opened(now);
        assert_eq!(b.state(), State::Open);
    }

    #[test]
    fn one_probe_at_a_time_when_due() {
        let now = Instant::now();
        let mut b = opened(now);
        let due = b.next_probe().expect("a probe is scheduled");
        assert_eq!(due, now + Duration::from_millis(500), "first probe after 1 s, jittered to [0.5, 1] s");
        assert_eq!(b.take_probe(now), None, "not yet");
        let t = b.take_probe(due).expect("due");
        assert_eq!((t.from, t.to), (State::Open, State::HalfOpen));
        assert_eq!(b.take_probe(due + Duration::from_secs(60)), None, "only one probe is out");
        assert_eq!(b.next_probe(), None);
    }

    #[test]
    fn a_failed_probe_reopens_with_a_longer_wait_and_a_success_closes() {
        let now = Instant::now();
        let mut b = opened(now);
        let mut at = b.next_probe().unwrap();
        let mut waits = Vec::new();
        for _ in 0..7 {
            b.take_probe(at).expect("due");
            let t = b.failed(at, 0.99).expect("reopens");
            assert_eq!((t.from, t.to), (State::HalfOpen, State::Open));
            let next = b.next_probe().unwrap();
            waits.push((next - at).as_millis());
            at = next;
        }
        assert_eq!(waits, vec![1_990, 3_980, 7_960, 15_920, 29_850, 29_850, 29_850]);
        let t = b.succeeded().expect("closes");
        assert_eq!((t.from, t.to, t.probes_failed), (State::Open, State::Closed, 7));
        assert_eq!((b.state(), b.failures()), (State::Closed, 0));
    }

    #[test]
    fn failures_while_open_only_count_and_an_abandoned_probe_is_due_again() {
        let now = Instant::now();
        let mut b = opened(now);
        let due = b.next_probe().unwrap();
        assert_eq!(b.failed(now, 0.0), None, "a delivery still out when it opened");
        assert_eq!(b.next_probe(), Some(due), "does not push the probe back");
        b.take_probe(due).unwrap();
        b.probe_abandoned(due);
        assert_eq!((b.state(), b.next_probe()), (State::Open, Some(due)));
    }

    #[test]
    fn probe_delays_are_capped_and_never_overflow() {
        assert_eq!(probe_delay(0, 0.0), Duration::from_millis(500));
        assert_eq!(probe_delay(0, 1.0), Duration::from_secs(1));
        assert_eq!(probe_delay(40, 1.0), LONGEST_PROBE_DELAY);
        assert_eq!(probe_delay(u32::MAX, 0.0), LONGEST_PROBE_DELAY / 2);
    }
}
