//! How many pollers a queue should have, from what the last window of receives showed.
//!
//! Why adapt: a poller brings at most one batch (10 messages) per round trip, so a reader's
//! ceiling is pollers x 10 / RTT. SQS answers in 5-50 ms depending on region and load; a fixed
//! count is either too few far away or wasteful nearby. Like Lambda's event source mapping, add
//! pollers while receives come back full and the work they bring is taken up, and give them back
//! when receives come back part-empty. More pollers never help when the sink or the rate limit is
//! what holds the reader back (they would only hold more messages invisible), so then the count
//! goes down. Nor do they when SQS itself is the limit: batches still come back full, but the
//! rate does not rise, so every growth is a trial that must pay off (at least half the gain its
//! added pollers promise) in the next window, or it is undone and growth rests for a while.
//! Pure: the caller measures, this decides.

use std::time::Duration;

/// A batch at least this full means the queue has more than the pollers take.
const FULL: f64 = 0.9;
/// A batch at most this full means the pollers take more than the queue has.
const SPARSE: f64 = 0.5;
/// Windows without growth after a growth that did not pay off.
const REST_WINDOWS: u32 = 30;

/// What the pollers of one queue saw in the last window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Receive calls answered (empty ones included, failures not).
    pub receives: u64,
    /// Messages those receives brought.
    pub messages: u64,
    /// Mean time a receive that brought messages took: the round trip plus SQS's own time.
    pub round_trip: Duration,
    /// Pollers had to wait for capacity (messages in work at the bound): the sink is the limit.
    pub waited_for_capacity: bool,
    /// Pollers had to wait for the rate limit.
    pub waited_for_rate: bool,
}

/// The bounds a count stays within.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// The spec's `receive.pollers` share of this queue: never fewer.
    pub min: usize,
    /// Never more (memory: each poller may hold its batches in work).
    pub max: usize,
    /// Messages per receive.
    pub batch: usize,
    /// The rate limit in messages per second, if any: more pollers than it takes are useless.
    pub rate: Option<u32>,
}

/// A queue's poller count, window after window.
#[derive(Debug)]
pub struct PollerCount {
    bounds: Bounds,
    current: usize,
    /// The last growth, on trial: the count before it and the messages of the window before it.
    trial: Option<(usize, u64)>,
    rest: u32,
}

impl PollerCount {
    /// Starts at `bounds.min`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, current: bounds.min, trial: None, rest: 0 }
    }

    pub fn current(&self) -> usize {
        self.current
    }

    /// The count for the next window, from what the last one (of the same length as the one
    /// before) showed.
    pub fn next(&mut self, window: Window) -> usize {
        self.rest = self.rest.saturating_sub(1);
        if let Some((from, before)) = self.trial.take() {
            let promised = (self.current - from) as f64 / from.max(1) as f64;
            let gained = window.messages as f64 / before.max(1) as f64 - 1.0;
            if gained < promised / 2.0 {
                self.current = from;
                self.rest = REST_WINDOWS;
                return self.current;
            }
        }
        let proposed = next(self.current, window, self.bounds);
        if proposed > self.current {
            if self.rest > 0 {
                return self.current;
            }
            self.trial = Some((self.current, window.messages));
        }
        self.current = proposed;
        self.current
    }
}

/// The next poller count for a queue that has `current` now, from one window alone.
pub fn next(current: usize, window: Window, bounds: Bounds) -> usize {
    let ceiling = ceiling(window.round_trip, bounds);
    let current = current.clamp(bounds.min, ceiling);
    if window.receives == 0 {
        return current;
    }
    let fill = window.messages as f64 / (window.receives as f64 * bounds.batch.max(1) as f64);
    let next = if window.waited_for_capacity || window.waited_for_rate {
        current.saturating_sub(1)
    } else if fill >= FULL {
        // Grow by a quarter (at least one): a backlog fills in a few windows, without overshoot.
        current + (current / 4).max(1)
    } else if fill <= SPARSE {
        current.saturating_sub(1)
    } else {
        current
    };
    next.clamp(bounds.min, ceiling)
}

/// `bounds.max`, or fewer when the rate limit is reached with fewer: a poller brings `batch`
/// messages per round trip, so `rate x RTT / batch` pollers (plus one for slack) reach the rate.
fn ceiling(round_trip: Duration, bounds: Bounds) -> usize {
    let by_rate = match (bounds.rate, round_trip.is_zero()) {
        (Some(rate), false) => {
            let per_poller = bounds.batch.max(1) as f64 / round_trip.as_secs_f64();
            (f64::from(rate) / per_poller).ceil() as usize + 1
        }
        _ => usize::MAX,
    };
    bounds.max.min(by_rate).max(bounds.min)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds { min: 2, max: 16, batch: 10, rate: None };

    fn window(receives: u64, messages: u64) -> Window {
        Window { receives, messages, round_trip: Duration::from_millis(20), ..Window::default() }
    }

    #[test]
    fn full_batches_add_pollers_up_to_the_bound() {
        let mut count = 2;
        let mut seen = vec![count];
        for _ in 0..12 {
            count = next(count, window(100, 1000), BOUNDS);
            seen.push(count);
        }
        assert_eq!(&seen[..6], &[2, 3, 4, 5, 6, 7]);
        assert_eq!(*seen.last().unwrap(), 16);
    }

    #[test]
    fn sparse_batches_give_pollers_back_down_to_the_spec() {
        assert_eq!(next(8, window(100, 200), BOUNDS), 7);
        assert_eq!(next(2, window(100, 0), BOUNDS), 2);
        assert_eq!(next(8, window(100, 700), BOUNDS), 8, "between sparse and full: keep");
        assert_eq!(next(8, window(0, 0), BOUNDS), 8, "no receive answered: keep");
    }

    #[test]
    fn a_slow_sink_or_the_rate_limit_takes_pollers_away_even_with_a_backlog() {
        let sink_bound = Window { waited_for_capacity: true, ..window(100, 1000) };
        assert_eq!(next(8, sink_bound, BOUNDS), 7);
        let rate_bound = Window { waited_for_rate: true, ..window(100, 1000) };
        assert_eq!(next(8, rate_bound, BOUNDS), 7);
    }

    #[test]
    fn growth_that_pays_goes_on_and_growth_that_does_not_is_undone_then_rests() {
        let mut count = PollerCount::new(BOUNDS);
        // The rate follows the pollers: 2 -> 3 -> 4.
        assert_eq!(count.next(window(100, 1000)), 3);
        assert_eq!(count.next(window(150, 1500)), 4);
        // Now the rate stays put although batches are full: the step to 5 is undone.
        assert_eq!(count.next(window(200, 2000)), 5);
        assert_eq!(count.next(window(200, 2000)), 4);
        for _ in 0..REST_WINDOWS - 1 {
            assert_eq!(count.next(window(200, 2000)), 4, "resting");
        }
        assert_eq!(count.next(window(200, 2000)), 5, "tries again after the rest");
        // Sparse batches still shrink it at any time.
        assert_eq!(count.next(window(200, 200)), 4);
        assert_eq!(count.current(), 4);
    }

    #[test]
    fn the_rate_limit_caps_the_count_by_the_round_trip() {
        // 100 msg/s at 50 ms: one poller brings 200 msg/s, so 1 + 1 slack, but never below min.
        let bounds = Bounds { rate: Some(100), ..BOUNDS };
        let far = Window { round_trip: Duration::from_millis(50), ..window(100, 1000) };
        assert_eq!(next(10, far, bounds), 2);
        // 1000 msg/s at 50 ms: 5 pollers + 1.
        let bounds = Bounds { rate: Some(1000), ..BOUNDS };
        assert_eq!(next(10, far, bounds), 6);
    }
}
