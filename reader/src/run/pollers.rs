//! A queue's pollers, as many as `intake::poller_count` says, resized once a window.
//!
//! Why a task per queue: each queue has its own round trip and backlog. The task starts the spec's
//! count, then every window reads what the queue's receives brought (`Queue::receives`) and how
//! long its pollers waited for room (the sink being the limit) or for the rate limit, and starts
//! pollers or retires the newest ones (a retired poller finishes the batch it has, then ends). On a stop it
//! waits for all of its pollers, so the drain sees the queue quiet when this task ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::intake::context::Intake;
use crate::intake::poller::{Poller, Waits};
use crate::intake::poller_count::{Bounds, PollerCount, Window};

/// How often the capacity is looked at within a window.
const TICK: Duration = Duration::from_millis(100);
/// Ticks per window: one resize a second at most.
const TICKS: u32 = 10;
/// Share of the pollers' time spent waiting for room (or for the rate limit) above which that,
/// not the pollers, is what limits the queue. A poller whose last batch is still being delivered
/// waits a little for room now and then; one that waits a tenth of its time is held back.
const WAITING: f64 = 0.1;

pub struct Crew {
    /// What the queue's pollers share.
    pub intake: Arc<Intake>,
    pub bounds: Bounds,
}

impl Crew {
    pub async fn run(self) {
        let mut pollers = JoinSet::new();
        let mut retire: Vec<CancellationToken> = Vec::new();
        let mut next_id = 0;
        let mut count = PollerCount::new(self.bounds);
        let waits = Arc::new(Waits::default());
        self.resize(count.current(), &mut retire, &mut pollers, &mut next_id, &waits);
        self.intake.queue.receives.take();
        let stop = self.intake.stop.clone();
        'windows: loop {
            let started = tokio::time::Instant::now();
            for _ in 0..TICKS {
                tokio::select! {
                    () = stop.stopped() => break 'windows,
                    () = tokio::time::sleep(TICK) => {}
                }
                while pollers.try_join_next().is_some() {}
            }
            let tallied = self.intake.queue.receives.take();
            let (room, rate) = waits.take();
            let poller_time = started.elapsed().as_secs_f64() * retire.len().max(1) as f64;
            let capacity_short = room.as_secs_f64() > WAITING * poller_time;
            let window = Window {
                receives: tallied.receives,
                messages: tallied.messages,
                round_trip: tallied.round_trip,
                waited_for_capacity: capacity_short,
                waited_for_rate: rate.as_secs_f64() > WAITING * poller_time,
            };
            tracing::debug!(
                queue = %self.intake.queue.url,
                pollers = retire.len(),
                messages = tallied.messages,
                round_trip_ms = tallied.round_trip.as_secs_f64() * 1000.0,
                room_wait_ms = room.as_millis() as u64,
                rate_wait_ms = rate.as_millis() as u64,
                "pollers window"
            );
            let want = count.next(window);
            if want != retire.len() {
                let fill =
                    tallied.messages as f64 / (tallied.receives.max(1) * self.bounds.batch as u64) as f64;
                tracing::info!(
                    queue = %self.intake.queue.url,
                    from = retire.len(),
                    to = want,
                    batch_fill = (fill * 100.0).round() / 100.0,
                    round_trip_ms = tallied.round_trip.as_millis() as u64,
                    sink_bound = capacity_short,
                    rate_bound = window.waited_for_rate,
                    "pollers resized"
                );
                self.resize(want, &mut retire, &mut pollers, &mut next_id, &waits);
            }
        }
        while pollers.join_next().await.is_some() {}
    }

    /// Start pollers up to `want`, or retire the newest down to it.
    fn resize(
        &self,
        want: usize,
        retire: &mut Vec<CancellationToken>,
        pollers: &mut JoinSet<()>,
        next_id: &mut usize,
        waits: &Arc<Waits>,
    ) {
        while retire.len() > want {
            if let Some(token) = retire.pop() {
                token.cancel();
            }
        }
        while retire.len() < want {
            let token = CancellationToken::new();
            let poller = Poller {
                id: self.intake.queue.index * 1000 + *next_id,
                intake: self.intake.clone(),
                retire: token.clone(),
                waits: waits.clone(),
            };
            pollers.spawn(poller.run());
            retire.push(token);
            *next_id += 1;
        }
    }
}
