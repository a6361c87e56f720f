//! When a sink tries again, and when it gives up.
//!
//! Why a small pure schedule and not `backon`: the sinks must (1) decide per attempt whether the
//! error is worth retrying at all (a 400 must end at once as `Rejected`, a 503 must not), (2) let a
//! server's `Retry-After` replace the computed delay, and (3) retry only the failed entries of an
//! SQS batch. `backon` retries a whole closure on a fixed delay iterator and draws its jitter from
//! a global RNG; here the delay is a function of (attempt, elapsed, hint, random draw), so every
//! branch of the schedule is a unit test without a clock or a network.

use std::time::{Duration, Instant};

use sluice_crds::{RetrySpec, RetryStrategy};

use crate::process::sink_stats::SinkStats;

/// What one attempt came to, as far as retrying is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptError {
    /// The connection could not be made (refused, DNS, TLS).
    Connect,
    /// The per-request timeout fired.
    Timeout,
    /// The server answered with this status; `retry_after` is its `Retry-After`, if any.
    Status { code: u16, retry_after: Option<Duration> },
    /// The request could not be sent for another reason that may pass (connection reset, ...).
    Io,
    /// The service said the caller is at fault (SQS `SenderFault`, a malformed message).
    SenderFault,
    /// The service failed on its side (SQS receiver fault, throttling).
    ServiceFault,
}

/// Whether an error is worth another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Retry; the optional duration is the server's own hint.
    Transient { hint: Option<Duration> },
    /// Retrying cannot help: the record is `Rejected`.
    Permanent,
}

/// The retry policy of one sink, built once from the source's `delivery.retry`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    strategy: RetryStrategy,
    max_attempts: u32,
    initial_delay: Duration,
    max_delay: Duration,
    max_elapsed: Duration,
    jitter: bool,
    retryable_status_codes: Vec<u16>,
}

impl RetryPolicy {
    pub fn from_spec(spec: &RetrySpec) -> Self {
        Self {
            strategy: spec.strategy,
            max_attempts: spec.max_attempts.max(1),
            initial_delay: Duration::from_millis(spec.initial_delay_ms),
            max_delay: Duration::from_millis(spec.max_delay_ms.max(spec.initial_delay_ms)),
            max_elapsed: Duration::from_secs(spec.max_elapsed_seconds),
            jitter: spec.jitter,
            retryable_status_codes: spec.retryable_status_codes.clone(),
        }
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Connect errors, timeouts, I/O errors, service faults and the configured statuses are
    /// transient; every other status and sender faults are permanent. A `Retry-After` is kept
    /// only on 429 and 503, the two statuses where RFC 9110 gives it that meaning.
    pub fn classify(&self, error: &AttemptError) -> Class {
        match error {
            AttemptError::Connect | AttemptError::Timeout | AttemptError::Io | AttemptError::ServiceFault => {
                Class::Transient { hint: None }
            }
            AttemptError::SenderFault => Class::Permanent,
            AttemptError::Status { code, retry_after } => {
                if self.retryable_status_codes.contains(code) {
                    let hint = if matches!(code, 429 | 503) { *retry_after } else { None };
                    Class::Transient { hint }
                } else {
                    Class::Permanent
                }
            }
        }
    }

    /// The pause before attempt `attempt + 1`, after `attempt` attempts (1-based) failed
    /// transiently and `elapsed` passed since the first began; `None` means give up.
    /// `draw` is a uniform number in [0, 1) for the jitter.
    pub fn next_delay(
        &self,
        attempt: u32,
        elapsed: Duration,
        hint: Option<Duration>,
        draw: f64,
    ) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let delay = match hint {
            Some(hint) => hint.min(self.max_delay),
            None => self.jittered(self.base_delay(attempt), draw),
        };
        if elapsed.saturating_add(delay) > self.max_elapsed {
            return None;
        }
        Some(delay)
    }

    /// The un-jittered delay after `attempt` failures: constant, or doubling from the initial
    /// delay; capped by `max_delay` either way.
    fn base_delay(&self, attempt: u32) -> Duration {
        let delay = match self.strategy {
            RetryStrategy::Fixed => self.initial_delay,
            RetryStrategy::Exponential => {
                let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
                self.initial_delay.saturating_mul(factor)
            }
        };
        delay.min(self.max_delay)
    }

    /// "Equal jitter": a delay drawn from [d/2, d]. It spreads retries of many readers apart
    /// while keeping the back-off growing, which full jitter (drawn from [0, d]) does not.
    fn jittered(&self, delay: Duration, draw: f64) -> Duration {
        if !self.jitter {
            return delay;
        }
        let half = delay / 2;
        half + half.mul_f64(draw.clamp(0.0, 1.0))
    }
}

/// Why a sink stops trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// Retrying cannot help.
    Permanent,
    /// The policy's attempts or time ran out after this many attempts.
    Exhausted { attempts: u32 },
}

/// One record's (or call's, or batch's) way through a [`RetryPolicy`]: the one retry loop every
/// sink runs, counting attempts, time and retries.
pub struct Attempts<'a> {
    policy: &'a RetryPolicy,
    stats: &'a SinkStats,
    started: Instant,
    made: u32,
}

impl<'a> Attempts<'a> {
    /// Before the first attempt.
    pub fn new(policy: &'a RetryPolicy, stats: &'a SinkStats) -> Self {
        Self { policy, stats, started: Instant::now(), made: 0 }
    }

    /// An attempt failed as `class`: the pause before the next one (counted as a retry), or why
    /// not to make one.
    pub fn failed(&mut self, class: Class) -> Result<Duration, GiveUp> {
        self.made += 1;
        let Class::Transient { hint } = class else { return Err(GiveUp::Permanent) };
        let delay = self.policy.next_delay(self.made, self.started.elapsed(), hint, fastrand::f64());
        let delay = delay.ok_or(GiveUp::Exhausted { attempts: self.made })?;
        self.stats.record_retry();
        Ok(delay)
    }

    /// Attempts made so far.
    pub fn made(&self) -> u32 {
        self.made
    }
}

/// A `Retry-After` value: delay-seconds, or an HTTP date (RFC 9110 section 10.2.3) measured
/// from `now_ms` (milliseconds since the Unix epoch). Dates in the past mean "now".
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    use aws_sdk_sqs::primitives::{DateTime, DateTimeFormat};
    let at = DateTime::from_str(value, DateTimeFormat::HttpDate).ok()?;
    let at_ms = at.to_millis().ok()?;
    Some(Duration::from_millis(u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(strategy: RetryStrategy, jitter: bool) -> RetryPolicy {
        RetryPolicy::from_spec(&RetrySpec {
            strategy,
            max_attempts: 5,
            initial_delay_ms: 100,
            max_delay_ms: 1_000,
            max_elapsed_seconds: 60,
            jitter,
            ..RetrySpec::default()
        })
    }

    const NONE: Option<Duration> = None;
    const ZERO: Duration = Duration::ZERO;

    #[test]
    fn attempts_stop_on_permanent_errors_and_after_the_last_attempt() {
        let (p, stats) = (policy(RetryStrategy::Fixed, false), SinkStats::default());
        let mut attempts = Attempts::new(&p, &stats);
        assert_eq!(attempts.failed(Class::Permanent), Err(GiveUp::Permanent));
        let mut attempts = Attempts::new(&p, &stats);
        let transient = Class::Transient { hint: None };
        for _ in 1..5 {
            assert_eq!(attempts.failed(transient), Ok(Duration::from_millis(100)));
        }
        assert_eq!(attempts.failed(transient), Err(GiveUp::Exhausted { attempts: 5 }));
        assert_eq!((attempts.made(), stats.retries()), (5, 4), "a retry is counted per pause");
    }

    #[test]
    fn exponential_doubles_then_caps_then_stops_at_max_attempts() {
        let p = policy(RetryStrategy::Exponential, false);
        let delays: Vec<_> = (1..=5).map(|a| p.next_delay(a, ZERO, NONE, 0.5)).collect();
        let ms = |v: u64| Some(Duration::from_millis(v));
        assert_eq!(delays, vec![ms(100), ms(200), ms(400), ms(800), None]);
        let capped = RetryPolicy { max_attempts: 10, ..p };
        assert_eq!(capped.next_delay(6, ZERO, NONE, 0.5), ms(1_000));
        assert_eq!(capped.next_delay(9, ZERO, NONE, 0.5), ms(1_000));
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let p = RetryPolicy { max_attempts: u32::MAX, ..policy(RetryStrategy::Exponential, false) };
        assert_eq!(p.next_delay(200, ZERO, NONE, 0.0), Some(Duration::from_secs(1)));
    }

    #[test]
    fn fixed_is_constant() {
        let p = policy(RetryStrategy::Fixed, false);
        for attempt in 1..5 {
            assert_eq!(p.next_delay(attempt, ZERO, NONE, 0.9), Some(Duration::from_millis(100)));
        }
    }

    #[test]
    fn jitter_stays_within_half_to_full_delay() {
        let p = policy(RetryStrategy::Exponential, true);
        assert_eq!(p.next_delay(3, ZERO, NONE, 0.0), Some(Duration::from_millis(200)));
        assert_eq!(p.next_delay(3, ZERO, NONE, 0.5), Some(Duration::from_millis(300)));
        assert_eq!(p.next_delay(3, ZERO, NONE, 0.99), Some(Duration::from_millis(398)));
        assert_eq!(p.next_delay(3, ZERO, NONE, 7.0), Some(Duration::from_millis(400)), "draws are clamped");
    }

    #[test]
    fn max_elapsed_ends_the_retries() {
        let p = policy(RetryStrategy::Fixed, false);
        assert_eq!(
            p.next_delay(1, Duration::from_millis(59_900), NONE, 0.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(p.next_delay(1, Duration::from_millis(59_901), NONE, 0.0), None);
    }

    #[test]
    fn retry_after_replaces_the_delay_but_is_bounded_by_max_delay() {
        let p = policy(RetryStrategy::Exponential, true);
        let hint = Some(Duration::from_millis(700));
        assert_eq!(p.next_delay(1, ZERO, hint, 0.0), Some(Duration::from_millis(700)));
        let long = Some(Duration::from_secs(120));
        assert_eq!(p.next_delay(1, ZERO, long, 0.0), Some(Duration::from_secs(1)));
    }

    #[test]
    fn one_attempt_means_no_retry() {
        let p = RetryPolicy::from_spec(&RetrySpec { max_attempts: 0, ..RetrySpec::default() });
        assert_eq!(p.max_attempts(), 1);
        assert_eq!(p.next_delay(1, ZERO, NONE, 0.0), None);
    }

    #[test]
    fn classifier_follows_the_default_status_list() {
        let p = RetryPolicy::from_spec(&RetrySpec::default());
        let status = |code| AttemptError::Status { code, retry_after: Some(Duration::from_secs(2)) };
        for code in [408, 500, 502, 504] {
            assert_eq!(p.classify(&status(code)), Class::Transient { hint: None }, "{code}");
        }
        for code in [429, 503] {
            assert_eq!(p.classify(&status(code)), Class::Transient { hint: Some(Duration::from_secs(2)) });
        }
        for code in [400, 401, 403, 404, 409, 413, 422, 501] {
            assert_eq!(p.classify(&status(code)), Class::Permanent, "{code}");
        }
        for e in [AttemptError::Connect, AttemptError::Timeout, AttemptError::Io, AttemptError::ServiceFault]
        {
            assert_eq!(p.classify(&e), Class::Transient { hint: None });
        }
        assert_eq!(p.classify(&AttemptError::SenderFault), Class::Permanent);
    }

    #[test]
    fn classifier_uses_the_configured_status_list() {
        let p =
            RetryPolicy::from_spec(&RetrySpec { retryable_status_codes: vec![409], ..RetrySpec::default() });
        let status = |code| AttemptError::Status { code, retry_after: None };
        assert_eq!(p.classify(&status(409)), Class::Transient { hint: None });
        assert_eq!(p.classify(&status(503)), Class::Permanent);
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(" 3 ", 0), Some(Duration::from_secs(3)));
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777 s after the epoch.
        let now_ms = 784_111_770_000;
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now_ms), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now_ms + 60_000), Some(ZERO));
        assert_eq!(parse_retry_after("soon", 0), None);
        assert_eq!(parse_retry_after("-1", 0), None);
    }
}
