//! How many pollers a queue should have, from what the last window of receives showed.
//!
//! Why adapt: a poller brings at most one batch (10 messages) per round trip, so a reader's
//! ceiling is pollers x 10 / RTT. SQS answers in 5-50 ms depending on region and load; a fixed
//! count is either too few far away or wasteful nearby. Like Lambda's event source mapping, add
//! pollers while receives come back full and the work they bring is taken up, and give them back
//! when receives come back part-empty. More pollers never help when the sink or the rate limit is
//! what holds the reader back (they would only hold more messages invisible), so then the count
//! goes down.
//!
//! Nor do they when SQS itself is the limit: batches still come back full, but the rate does not
//! rise and each call waits longer at SQS. So growth is a trial that must pay: in the next window
//! the rate must rise by most of what the added pollers promise (`PAYS`), or the growth is undone
//! and growth rests, longer after each trial that failed. And a round trip well above the
//! queue's moving baseline (the calls queue at SQS) stops growth, or sheds a poller when far
//! above it. A poller that does not pay costs twice: it holds messages invisible, and it adds
//! to the queueing that slows every other poller's call.
//! Pure: the caller measures, this decides.

use std::time::Duration;

/// A batch at least this full means the queue has more than the pollers take.
const FULL: f64 = 0.9;
/// A batch at most this full means the pollers take more than the queue has.
const SPARSE: f64 = 0.5;
/// Share of the promised gain a growth must bring to be kept (pollers 4 -> 5 promise +25 %: the
/// rate must rise at least 20 %).
const PAYS: f64 = 0.8;
/// Windows without growth after the first growth that did not pay; doubled after each further one.
const REST_WINDOWS: u32 = 30;
const LONGEST_REST: u32 = 600;
/// Round trip over its baseline above which pollers are not added: the calls queue at SQS.
const QUEUEING: f64 = 1.25;
/// Round trip over its baseline above which a poller is shed.
const CONGESTED: f64 = 1.6;
/// How far the baseline follows a slower round trip each window (it follows a faster one at
/// once): a route that really got slower becomes the new normal within a minute or so.
const BASELINE_DRIFT: f64 = 0.05;

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

/// A growth on trial: the count before it and the messages of the window that decided it.
#[derive(Clone, Copy, Debug)]
struct Trial {
    from: usize,
    before: u64,
}

/// A queue's poller count, window after window.
#[derive(Debug)]
pub struct PollerCount {
    bounds: Bounds,
    current: usize,
    trial: Option<Trial>,
    /// Windows left without growth, and the rest the next failed trial earns.
    rest: u32,
    next_rest: u32,
    /// The queue's usual round trip for a receive that brought messages (seconds).
    baseline: Option<f64>,
}

impl PollerCount {
    /// Starts at `bounds.min`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, current: bounds.min, trial: None, rest: 0, next_rest: REST_WINDOWS, baseline: None }
    }

    pub fn current(&self) -> usize {
        self.current
    }

    /// The count for the next window, from what the last one (of the same length as the one
    /// before) showed.
    pub fn next(&mut self, window: Window) -> usize {
        self.rest = self.rest.saturating_sub(1);
        let slowed = self.slowed(window);
        if let Some(trial) = self.trial.take() {
            let promised = (self.current - trial.from) as f64 / trial.from.max(1) as f64;
            let gained = window.messages as f64 / trial.before.max(1) as f64 - 1.0;
            if gained < promised * PAYS {
                self.current = trial.from;
                self.rest = self.next_rest;
                self.next_rest = (self.next_rest * 2).min(LONGEST_REST);
                return self.current;
            }
            self.next_rest = REST_WINDOWS;
        }
        let mut proposed = next(self.current, window, self.bounds);
        if slowed >= CONGESTED {
            proposed = proposed.min(self.current.saturating_sub(1)).max(self.bounds.min);
        } else if slowed >= QUEUEING {
            proposed = proposed.min(self.current);
        }
        if proposed > self.current {
            if self.rest > 0 {
                return self.current;
            }
            self.trial = Some(Trial { from: self.current, before: window.messages });
        }
        self.current = proposed;
        self.current
    }

    /// The window's round trip over the baseline (1: as usual), updating the baseline.
    fn slowed(&mut self, window: Window) -> f64 {
        let rtt = window.round_trip.as_secs_f64();
        if window.messages == 0 || rtt <= 0.0 {
            return 1.0;
        }
        let baseline = self.baseline.unwrap_or(rtt);
        let ratio = rtt / baseline;
        self.baseline = Some(if rtt < baseline { rtt } else { baseline + BASELINE_DRIFT * (rtt - baseline) });
        ratio
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

    /// One second of a queue with a backlog, `pollers` receiving through a `rtt_ms` round trip
    /// from an SQS that serves at most `served` messages/s: below that every receive is full and
    /// takes the round trip; at it, calls queue at SQS, so each takes longer and the rate stays.
    fn backlog(pollers: usize, rtt_ms: f64, served: f64) -> Window {
        let offered = pollers as f64 * 10.0 * 1000.0 / rtt_ms;
        let rate = offered.min(served);
        let took_ms = pollers as f64 * 10.0 * 1000.0 / rate;
        Window {
            receives: (rate / 10.0) as u64,
            messages: rate as u64,
            round_trip: Duration::from_secs_f64(took_ms / 1000.0),
            ..Window::default()
        }
    }

    /// The counts a controller goes through over `windows` windows of `world`.
    fn run(bounds: Bounds, windows: usize, world: impl Fn(usize) -> Window) -> Vec<usize> {
        let mut count = PollerCount::new(bounds);
        let mut seen = vec![count.current()];
        for _ in 0..windows {
            let window = world(count.current());
            seen.push(count.next(window));
        }
        seen
    }

    #[test]
    fn a_far_sqs_that_scales_gets_pollers_up_to_the_bound() {
        let seen = run(Bounds { min: 4, max: 8, ..BOUNDS }, 20, |p| backlog(p, 50.0, f64::INFINITY));
        assert_eq!(&seen[..5], &[4, 5, 6, 7, 8]);
        assert!(seen[4..].iter().all(|&p| p == 8), "every growth paid: {seen:?}");
    }

    #[test]
    fn a_saturated_sqs_keeps_the_count_where_the_rate_stops_rising() {
        // 50 ms away, serving at most 1,100 messages/s: 5 pollers bring 1,000, the 6th only queues.
        let seen = run(Bounds { min: 4, max: 8, ..BOUNDS }, 300, |p| backlog(p, 50.0, 1100.0));
        assert_eq!(&seen[..3], &[4, 5, 6], "5 paid (+25 %), 6 is on trial");
        assert_eq!(seen[3], 5, "6 brought +10 % of a promised +20 %: undone");
        let above = seen.iter().filter(|&&p| p > 5).count();
        assert!(above <= 5, "trials above 5 rest longer each time: {above} windows of 300");
        assert_eq!(*seen.last().unwrap(), 5);
    }

    #[test]
    fn an_sqs_already_at_its_limit_gets_no_pollers_added() {
        // 5 ms away: 4 pollers would take 8,000 messages/s, SQS serves 1,100; each added poller only
        // lengthens every call.
        let seen = run(Bounds { min: 4, max: 8, ..BOUNDS }, 300, |p| backlog(p, 5.0, 1100.0));
        assert_eq!(seen[1], 5, "the first trial");
        assert_eq!(seen[2], 4, "it did not pay");
        assert!(seen.iter().filter(|&&p| p > 4).count() <= 5, "{seen:?}");
        assert_eq!(*seen.last().unwrap(), 4);
    }

    #[test]
    fn calls_slowing_at_sqs_stop_growth_and_shed_pollers() {
        let mut count = PollerCount::new(Bounds { min: 2, max: 16, ..BOUNDS });
        let at = |ms: u64| Window { round_trip: Duration::from_millis(ms), ..window(100, 1000) };
        assert_eq!(count.next(at(20)), 3);
        assert_eq!(count.next(Window { messages: 1500, ..at(20) }), 4, "paid");
        assert_eq!(count.next(Window { messages: 2000, ..at(26) }), 4, "queueing: no growth");
        assert_eq!(count.next(Window { messages: 2000, ..at(34) }), 3, "congested: one fewer");
    }

    #[test]
    fn a_slow_sink_takes_pollers_back_to_the_spec() {
        let sink_bound = |p: usize| Window { waited_for_capacity: true, ..backlog(p, 20.0, f64::INFINITY) };
        let seen = run(Bounds { min: 4, max: 8, ..BOUNDS }, 10, sink_bound);
        assert!(seen.iter().all(|&p| p == 4), "{seen:?}");
    }

    #[test]
    fn a_rate_limit_keeps_the_count_to_what_reaches_it() {
        // 300 messages/s at 50 ms: 2 pollers + 1 reach it; the spec's 4 stay, no more.
        let bounds = Bounds { min: 4, max: 8, rate: Some(300), ..BOUNDS };
        let limited = |p: usize| Window { waited_for_rate: true, ..backlog(p, 50.0, 300.0) };
        assert!(run(bounds, 10, limited).iter().all(|&p| p == 4));
        let bounds = Bounds { min: 1, max: 8, rate: Some(300), ..BOUNDS };
        let seen = run(bounds, 10, |p| backlog(p, 50.0, 300.0));
        assert!(seen.iter().all(|&p| p <= 3), "{seen:?}");
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
