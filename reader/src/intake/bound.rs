//! The rule for how much a reader may hold: what it can deliver within a short horizon.
//!
//! Why these inputs: a held message is worth taking only if it will be delivered soon. Two things
//! say how soon: the rate-limit share (at `r` messages/s, `r × horizon` messages are all the
//! limiter lets through in the horizon), and the sinks (with concurrency `c` and delivery time
//! `t`, they finish `c / t` messages a second; measured directly as the drain while pollers wait
//! for room, which also counts retries, FIFO runs and dead-letter deliveries). The bound is the
//! smaller of the two over the horizon, within the spec's ceilings.
//!
//! Fair start: a reader starts at two receive batches per poller (one on the wire, one being
//! delivered: with one, a poller could not receive again until its last batch had settled, so
//! each of its turns would cost a delivery on top of the round trip) and its bound at most doubles
//! each step (one second), so a reader that has just started does not drain a backlog ahead of
//! replicas starting beside it; it grows only as far as its deliveries show it can go. Under
//! exactlyOnce the horizon is at most half the checkpoint interval, so an epoch runs about
//! that much past its interval.
//!
//! A floor for buffering sinks: under atLeastOnce an s3 sink holds records until an object is
//! full (`spec.sinks[].s3.buffer`), and they stay in the bound until then. Measured by drain
//! alone, a bound would shrink while an object fills (nothing settles) and the object could never
//! fill, so the bound never goes below one object's `maxRecords`, itself never above the
//! `held.maxMessages` ceiling (a larger hint is clamped to it, with one WARN line at start).

use std::time::Duration;

use sluice_crds::Guarantee;

use crate::config::settings::{HeldSettings, RateSettings, Settings};
use crate::settle::held::Bound;

/// How often the bound is worked out again (and how long a doubling takes).
pub const STEP: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// The spec's ceilings.
    pub ceiling: Bound,
    pub horizon: Duration,
    /// One receive batch: the least a bound ever is.
    pub batch: usize,
    /// The bound a reader starts with: two batches per poller.
    pub start: usize,
    /// The least the bound ever is for a buffering sink to fill an object (0: none).
    pub floor: usize,
}

impl Rule {
    /// The rule for a reader run with `settings`.
    pub fn from_settings(settings: &Settings) -> Self {
        let r = &settings.receive;
        let interval = match settings.guarantee {
            Guarantee::ExactlyOnce => settings.checkpoint_interval,
            Guarantee::AtLeastOnce => None,
        };
        let rule = Self::new(&r.held, r.pollers, r.max_messages as usize, interval);
        match settings.guarantee {
            Guarantee::AtLeastOnce => Self { floor: buffer_floor(settings, &rule.ceiling), ..rule },
            Guarantee::ExactlyOnce => rule,
        }
    }

    /// From the settings: `pollers` pollers of `batch` messages; `interval`: exactlyOnce's
    /// checkpoint interval.
    pub fn new(held: &HeldSettings, pollers: usize, batch: usize, interval: Option<Duration>) -> Self {
        let horizon = interval.map_or(held.horizon, |i| held.horizon.min(i / 2));
        let ceiling = Bound { messages: held.max_messages, bytes: held.max_bytes };
        let start = (2 * pollers * batch).min(held.max_messages).max(1);
        Self { ceiling, horizon, batch, start, floor: 0 }
    }

    /// The next bound after `previous` (`None`: the first), given the drain measured over the
    /// last step while pollers waited for room (`None`: they never waited, the drain says only how
    /// fast work came) and this replica's rate-limit share.
    pub fn next(&self, previous: Option<Bound>, drain_per_second: Option<f64>, rate: RateSettings) -> Bound {
        let horizon = self.horizon.as_secs_f64();
        let mut messages = match previous {
            None => self.start,
            Some(p) => match drain_per_second {
                // Grow at most twofold a step, shrink at most by half (one slow second is noise).
                Some(d) => ((d * horizon).ceil() as usize).clamp(p.messages / 2, p.messages * 2),
                None => p.messages,
            },
        };
        if let Some(r) = rate.messages_per_second {
            messages = messages.min((f64::from(r) * horizon).ceil() as usize);
        }
        let mut bytes = self.ceiling.bytes;
        if let Some(b) = rate.bytes_per_second {
            bytes = bytes.min((b as f64 * horizon).ceil() as u64);
        }
        let messages = messages.max(self.batch).max(self.floor).min(self.ceiling.messages);
        Bound { messages, bytes: bytes.max(1) }
    }
}

/// The records one object of the source's buffering s3 sinks needs, within `ceiling`; a hint
/// above the ceiling is named once (it cannot be reached: records are held until written).
fn buffer_floor(settings: &Settings, ceiling: &Bound) -> usize {
    let mut floor = 0;
    for (i, sink) in settings.spec.sinks.iter().enumerate() {
        let Some(buffer) = sink.s3.as_ref().map(|s3| s3.buffer) else { continue };
        let records = buffer.max_records as usize;
        if records > ceiling.messages {
            tracing::warn!(
                "spec.sinks[{i}].s3.buffer.maxRecords ({records}) is above spec.receive.held.maxMessages ({}): objects hold at most that many records; raise held.maxMessages or lower maxRecords",
                ceiling.messages
            );
        }
        if buffer.max_bytes > ceiling.bytes {
            tracing::warn!(
                "spec.sinks[{i}].s3.buffer.maxBytes ({}) is above spec.receive.held.maxBytes ({}): objects hold at most that many bytes; raise held.maxBytes or lower maxBytes",
                buffer.max_bytes,
                ceiling.bytes
            );
        }
        floor = floor.max(records.min(ceiling.messages));
    }
    floor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        let held = HeldSettings { max_messages: 1000, max_bytes: 1 << 26, horizon: Duration::from_secs(2) };
        Rule::new(&held, 4, 10, None)
    }

    fn rate(mps: Option<u32>, bps: Option<u64>) -> RateSettings {
        RateSettings { messages_per_second: mps, bytes_per_second: bps, burst_seconds: 1 }
    }

    #[test]
    fn a_reader_starts_at_two_batches_per_poller_and_at_most_doubles() {
        let r = rule();
        let mut bound = r.next(None, None, RateSettings::default());
        assert_eq!(bound.messages, 80);
        let mut steps = Vec::new();
        for _ in 0..6 {
            bound = r.next(Some(bound), Some(5_000.0), RateSettings::default());
            steps.push(bound.messages);
        }
        assert_eq!(steps, vec![160, 320, 640, 1000, 1000, 1000], "doubling up to the ceiling");
    }

    #[test]
    fn a_slow_sink_keeps_the_bound_at_what_it_delivers_in_the_horizon() {
        // Concurrency 4 at 200 ms: 20 messages/s, 40 in a 2 s horizon.
        let r = rule();
        let bound =
            r.next(Some(r.next(None, None, RateSettings::default())), Some(20.0), RateSettings::default());
        assert_eq!(bound.messages, 40);
        let slower = r.next(Some(bound), Some(5.0), RateSettings::default());
        assert_eq!(slower.messages, 20, "halves at most per step");
        let slower = r.next(Some(slower), Some(5.0), RateSettings::default());
        assert_eq!(slower.messages, 10);
        let slower = r.next(Some(slower), Some(1.0), RateSettings::default());
        assert_eq!(slower.messages, 10, "never below one batch");
    }

    #[test]
    fn not_waiting_for_room_leaves_the_bound_alone() {
        let r = rule();
        let b = Bound { messages: 320, bytes: 1 << 26 };
        assert_eq!(r.next(Some(b), None, RateSettings::default()), b);
    }

    #[test]
    fn the_rate_share_caps_the_bound_to_the_horizon() {
        let r = rule();
        let share = rate(Some(17), Some(1000));
        let bound = r.next(Some(Bound { messages: 640, bytes: 1 << 26 }), None, share);
        assert_eq!(bound, Bound { messages: 34, bytes: 2000 });
        assert_eq!(r.next(None, None, rate(Some(1), None)).messages, 10, "one batch at least");
    }

    #[test]
    fn a_buffering_sink_keeps_the_bound_at_one_object_while_it_fills() {
        let rule = Rule { floor: 600, ..rule() };
        let mut bound = rule.next(None, None, rate(None, None));
        for _ in 0..10 {
            // Nothing settles while the object fills: the drain is 0.
            bound = rule.next(Some(bound), Some(0.0), rate(None, None));
        }
        assert_eq!(bound.messages, 600);
        assert_eq!(
            Rule { floor: 5000, ..rule }.next(Some(bound), Some(0.0), rate(None, None)).messages,
            1000
        );
    }

    #[test]
    fn exactly_once_holds_at_most_half_an_interval() {
        let held = HeldSettings { max_messages: 1000, max_bytes: 1 << 26, horizon: Duration::from_secs(2) };
        let r = Rule::new(&held, 4, 10, Some(Duration::from_secs(3)));
        assert_eq!(r.horizon, Duration::from_millis(1500));
        assert_eq!(r.next(None, None, rate(Some(20), None)).messages, 30);
    }

    #[test]
    fn a_small_ceiling_wins() {
        let held = HeldSettings { max_messages: 5, max_bytes: 1 << 20, horizon: Duration::from_secs(2) };
        let r = Rule::new(&held, 4, 10, None);
        assert_eq!(r.next(None, None, RateSettings::default()).messages, 5);
    }
}
