//! A queue's pollers, as many as `intake::poller_count` says, resized once a window.
//!
//! Why a task per queue: each queue has its own round trip and backlog. The task starts the spec's
//! count, then every window reads what the queue's receives brought (`Queue::receives`) and
//! whether pollers found the capacity exhausted (the sink being the limit), and starts pollers or
//! retires the newest ones (a retired poller finishes the batch it has, then ends). On a stop it
//! waits for all of its pollers, so the drain sees the queue quiet when this task ends.

use std::sync::Arc;
use std::time::Duration;

use sluice_crds::PayloadFormat;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::aws::queue::Queue;
use crate::config::settings::ReceiveSettings;
use crate::intake::limiter::Limiter;
use crate::intake::poller::Poller;
use crate::intake::poller_count::{Bounds, PollerCount, Window};
use crate::payload::Resolver;
use crate::settle::Pipeline;
use crate::settle::held::Held;

/// How often the capacity is looked at within a window.
const TICK: Duration = Duration::from_millis(100);
/// Ticks per window: one resize a second at most.
const TICKS: u32 = 10;

pub struct Crew {
    pub queue: Arc<Queue>,
    pub receive: ReceiveSettings,
    pub payload: PayloadFormat,
    pub limiter: Arc<Limiter>,
    /// What the reader holds, shared by every poller: no room for a batch means the sinks are the limit.
    pub held: Arc<Held>,
    pub pipeline: Arc<Pipeline>,
    /// Fetches the payloads S3 notifications and Extended Client pointers name (absent: neither).
    pub resolver: Option<Arc<Resolver>>,
    pub bounds: Bounds,
}

impl Crew {
    pub async fn run(self) {
        let mut pollers = JoinSet::new();
        let mut retire: Vec<CancellationToken> = Vec::new();
        let mut next_id = 0;
        let mut count = PollerCount::new(self.bounds);
        self.resize(count.current(), &mut retire, &mut pollers, &mut next_id);
        self.queue.receives.take();
        let stop = self.pipeline.stop().clone();
        'windows: loop {
            let mut capacity_short = false;
            for _ in 0..TICKS {
                tokio::select! {
                    () = stop.stopped() => break 'windows,
                    () = tokio::time::sleep(TICK) => {}
                }
                let figures = self.held.figures();
                capacity_short |= figures.bound.messages.saturating_sub(figures.messages) < self.bounds.batch;
                while pollers.try_join_next().is_some() {}
            }
            let tallied = self.queue.receives.take();
            let window = Window {
                receives: tallied.receives,
                messages: tallied.messages,
                round_trip: tallied.round_trip,
                waited_for_capacity: capacity_short,
                waited_for_rate: false,
            };
            let want = count.next(window);
            if want != retire.len() {
                let fill =
                    tallied.messages as f64 / (tallied.receives.max(1) * self.bounds.batch as u64) as f64;
                tracing::info!(
                    queue = %self.queue.url,
                    from = retire.len(),
                    to = want,
                    batch_fill = (fill * 100.0).round() / 100.0,
                    round_trip_ms = tallied.round_trip.as_millis() as u64,
                    sink_bound = capacity_short,
                    "pollers resized"
                );
                self.resize(want, &mut retire, &mut pollers, &mut next_id);
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
    ) {
        while retire.len() > want {
            if let Some(token) = retire.pop() {
                token.cancel();
            }
        }
        while retire.len() < want {
            let token = CancellationToken::new();
            let poller = Poller {
                id: self.queue.index * 1000 + *next_id,
                queue: self.queue.clone(),
                receive: self.receive.clone(),
                payload: self.payload,
                limiter: self.limiter.clone(),
                held: self.held.clone(),
                pipeline: self.pipeline.clone(),
                resolver: self.resolver.clone(),
                retire: token.clone(),
            };
            pollers.spawn(poller.run());
            retire.push(token);
            *next_id += 1;
        }
    }
}
