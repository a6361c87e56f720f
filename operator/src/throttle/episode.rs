//! Throttling episodes, decided from the times of throttled answers alone.
//!
//! Why episodes: a throttled operator gets hundreds of 429s a minute; a person needs one line when
//! it starts and one when it is over, with the totals, not a line per request. An episode ends
//! `quiet` after the last retry it scheduled, if no throttled answer came meanwhile (a success in
//! between proves little: another flow of the same operator, its Lease say, may not be throttled
//! at all; and a retry told to wait 30 s is still part of the episode while it waits).

use std::time::{Duration, Instant};

/// One stretch of throttling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Episode {
    pub started: Instant,
    /// When the last retry it scheduled is due (the latest `now + wait`).
    pub last: Instant,
    /// Throttled answers in it.
    pub responses: u64,
    /// Time the retries were told to wait, summed over requests.
    pub waited: Duration,
}

/// Whether a throttled answer started an episode or belongs to the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A new episode; `after` is the one before it if that had ended (quiet long enough) but no
    /// tick had said so yet, so that its end is told before the new start.
    Began {
        after: Option<Episode>,
    },
    Continues,
}

#[derive(Clone, Debug)]
pub struct Throttling {
    quiet: Duration,
    current: Option<Episode>,
}

impl Throttling {
    pub const fn new(quiet: Duration) -> Self {
        Self { quiet, current: None }
    }

    /// Records one throttled answer at `now` whose retry waits `wait`.
    pub fn throttled(&mut self, now: Instant, wait: Duration) -> Seen {
        match &mut self.current {
            Some(episode) if now.saturating_duration_since(episode.last) < self.quiet => {
                episode.last = episode.last.max(now + wait);
                episode.responses += 1;
                episode.waited += wait;
                Seen::Continues
            }
            _ => {
                let after = self.current.replace(Episode {
                    started: now,
                    last: now + wait,
                    responses: 1,
                    waited: wait,
                });
                Seen::Began { after }
            }
        }
    }

    /// The episode that ended by `now` (no throttled answer for `quiet`), once.
    pub fn tick(&mut self, now: Instant) -> Option<Episode> {
        let over = self.current.is_some_and(|e| now.saturating_duration_since(e.last) >= self.quiet);
        if over { self.current.take() } else { None }
    }

    /// Whether an episode is running.
    pub const fn active(&self) -> bool {
        self.current.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_starts_once_sums_and_ends_after_quiet() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut throttling = Throttling::new(Duration::from_secs(10));
        assert!(!throttling.active());
        assert_eq!(throttling.throttled(s(0), Duration::from_secs(1)), Seen::Began { after: None });
        assert_eq!(throttling.throttled(s(5), Duration::from_secs(2)), Seen::Continues);
        assert_eq!(throttling.throttled(s(14), Duration::from_secs(4)), Seen::Continues);
        assert_eq!(throttling.tick(s(27)), None, "9 s after the last retry (at 18 s) is not yet the end");
        assert!(throttling.active());
        let ended = throttling.tick(s(28));
        assert_eq!(
            ended,
            Some(Episode { started: s(0), last: s(18), responses: 3, waited: Duration::from_secs(7) })
        );
        assert_eq!(throttling.tick(s(30)), None, "an episode ends once");
        assert!(!throttling.active());
        assert_eq!(throttling.throttled(s(31), Duration::ZERO), Seen::Began { after: None }, "a new episode");
    }

    #[test]
    fn a_long_retry_after_keeps_the_episode_open_while_the_retry_waits() {
        let t0 = Instant::now();
        let mut throttling = Throttling::new(Duration::from_secs(10));
        assert_eq!(throttling.throttled(t0, Duration::from_secs(32)), Seen::Began { after: None });
        assert_eq!(throttling.tick(t0 + Duration::from_secs(41)), None);
        assert_eq!(
            throttling.throttled(t0 + Duration::from_secs(33), Duration::from_secs(1)),
            Seen::Continues
        );
        assert_eq!(throttling.tick(t0 + Duration::from_secs(43)), None, "its retry is due at 34 s");
        assert!(throttling.tick(t0 + Duration::from_secs(44)).is_some());
    }

    #[test]
    fn a_late_answer_after_quiet_starts_a_new_episode_even_without_a_tick_and_hands_back_the_old_one() {
        let t0 = Instant::now();
        let mut throttling = Throttling::new(Duration::from_secs(10));
        assert_eq!(throttling.throttled(t0, Duration::ZERO), Seen::Began { after: None });
        let ended = Episode { started: t0, last: t0, responses: 1, waited: Duration::ZERO };
        assert_eq!(
            throttling.throttled(t0 + Duration::from_secs(11), Duration::ZERO),
            Seen::Began { after: Some(ended) },
            "the first episode's end is told before the second's start"
        );
        assert_eq!(throttling.tick(t0 + Duration::from_secs(12)), None, "the second is still on");
    }
}
