//! The task that keeps the bound on what a reader holds current: each step it measures the drain
//! (messages settled per second), reads the rate-limit share, and sets the bound `bound::Rule`
//! gives. The pollers only wait for room (`settle::held`); they never work the bound out.
//!
//! Why the drain is smoothed: messages settle in receive batches (a rate-limited reader passes ten
//! at a time), so one second may see 10 and the next 20; the bound follows a moving average
//! rather than each second's count.

use std::sync::Arc;
use std::time::Instant;

use super::bound::{Rule, STEP};
use super::limiter::Limiter;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;
use crate::settle::held::{Bound, Held};

/// Weight of the newest step in the drain's moving average.
const NEWEST: f64 = 0.5;

/// What a reader holds and the task that paces it, for the pollers to share.
pub fn start(rule: Rule, limiter: Arc<Limiter>, metrics: Arc<Metrics>, stop: Stop) -> Arc<Held> {
    let first = rule.next(None, None, limiter.rate());
    let held = Held::with_gauges(first, metrics.held.messages.clone(), metrics.held.bytes.clone());
    publish(&metrics, first);
    let paced = held.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(STEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let (mut bound, mut settled, mut since) = (first, 0u64, Instant::now());
        let mut average: Option<f64> = None;
        loop {
            tokio::select! {
                () = stop.stopped() => return,
                _ = tick.tick() => {}
            }
            let figures = paced.figures();
            let elapsed = since.elapsed().as_secs_f64().max(0.001);
            let drain = (figures.settled - settled) as f64 / elapsed;
            let measured = paced.take_saturated().then(|| {
                let smoothed = average.map_or(drain, |a| a + NEWEST * (drain - a));
                average = Some(smoothed);
                smoothed
            });
            let next = rule.next(Some(bound), measured, limiter.rate());
            if next != bound {
                tracing::debug!(messages = next.messages, bytes = next.bytes, drain, "held bound changed");
                paced.set_bound(next);
                publish(&metrics, next);
            }
            (bound, settled, since) = (next, figures.settled, Instant::now());
        }
    });
    held
}

fn publish(metrics: &Metrics, bound: Bound) {
    metrics.held.bound_messages.set(bound.messages as i64);
    metrics.held.bound_bytes.set(i64::try_from(bound.bytes).unwrap_or(i64::MAX));
}
