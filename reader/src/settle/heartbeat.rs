//! The visibility heartbeat: messages still ours are kept invisible until we are done with them.
//!
//! Why at half the timeout: a slow sink (retries with backoff, a large epoch under exactly-once)
//! must not let SQS hand the message to another reader meanwhile; extending when half the
//! timeout is left leaves the other half for the ChangeMessageVisibilityBatch call to land.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
use sluice_protocol::now_ms;
use tokio_util::sync::CancellationToken;

use super::acker::BATCH;
use super::events::ExtendFailed;
use super::gate::Gate;
use super::ledger::{Ledger, Receipt, Ticket};
use crate::aws::error_type;
use crate::aws::queue::Queue;
use crate::aws::requests::PerMessage;
use crate::process::events::Event;
use crate::process::metrics::Metrics;

const TICK: Duration = Duration::from_millis(500);

pub struct Heartbeat {
    pub queues: Vec<Arc<Queue>>,
    pub ledger: Arc<Mutex<Ledger>>,
    pub metrics: Arc<Metrics>,
    /// Told after each beat until when the held messages are covered (under exactlyOnce the
    /// lease must not outlast that) and the figures the autoscaler reads from the lease.
    pub gate: Arc<dyn Gate>,
    /// The batching window: a message due for extension within it is extended with those due
    /// now, so the calls go out fuller.
    pub window: Duration,
}

/// How far back the drain rate reported in the lease looks.
const DRAIN_WINDOW: Duration = Duration::from_secs(10);
/// The least busy time a drain rate is measured over; shorter, the reader reports none (0).
const DRAIN_LEAST: Duration = Duration::from_secs(2);
/// How far back the requests per delivered message in the report look: long enough that a
/// batching window's deletes and a trickle's receives both land in it.
const COST_WINDOW: Duration = Duration::from_secs(60);

impl Heartbeat {
    /// Beat until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut deletes: VecDeque<(std::time::Instant, u64)> = VecDeque::new();
        let mut cost = PerMessage::new(COST_WINDOW);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => self.beat().await,
            }
            let now = std::time::Instant::now();
            // An idle reader's rate says nothing of what it could do: the window starts afresh
            // whenever it holds nothing, so the rate is measured over busy time only.
            if self.ledger.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                deletes.clear();
            }
            deletes.push_back((now, self.metrics.deleted.get()));
            while deletes.front().is_some_and(|(t, _)| now.duration_since(*t) > DRAIN_WINDOW) {
                deletes.pop_front();
            }
            self.report(&deletes, now);
            self.metrics.report.cost(cost.observe(
                now,
                self.metrics.requests.billed_total(),
                self.metrics.deleted.get(),
            ));
        }
    }

    /// Coverage and figures for the gate. Coverage: the earliest moment one of our messages
    /// could become visible to others, in ms since the Unix epoch (`i64::MAX` when we hold none).
    fn report(&self, deletes: &VecDeque<(std::time::Instant, u64)>, now: std::time::Instant) {
        let (covered, in_flight) = {
            let ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            (ledger.covered_until(), ledger.len() as u64)
        };
        let covered_ms = covered.map_or(i64::MAX, |until| {
            let ahead = i64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX);
            now_ms().saturating_add(ahead)
        });
        let drain = match (deletes.front(), deletes.back()) {
            (Some((t0, d0)), Some((t1, d1))) if t1.duration_since(*t0) >= DRAIN_LEAST => {
                let per_second = (d1 - d0) as f64 / t1.duration_since(*t0).as_secs_f64();
                (per_second * 1000.0) as u64
            }
            _ => 0,
        };
        self.metrics.report.drained(drain);
        self.gate.held(covered_ms, drain, in_flight);
    }

    /// How far ahead a beat extends: the batching window, but at most a quarter of the shortest
    /// visibility timeout, so an extension still lands well after the last one.
    fn look_ahead(&self) -> Duration {
        let shortest = self.queues.iter().map(|q| q.visibility).min().unwrap_or_default();
        self.window.min(shortest / 4)
    }

    async fn beat(&self) {
        let now = std::time::Instant::now();
        let due =
            self.ledger.lock().unwrap_or_else(|e| e.into_inner()).due_for_extension(now + self.look_ahead());
        if due.is_empty() {
            return;
        }
        let mut by_queue: HashMap<(usize, u64), Vec<(Ticket, Receipt)>> = HashMap::new();
        for (ticket, receipt, visibility) in due {
            by_queue.entry((receipt.queue, visibility.as_secs())).or_default().push((ticket, receipt));
        }
        let calls = by_queue.iter().flat_map(|((queue, seconds), items)| {
            items.chunks(BATCH).map(move |chunk| self.extend(*queue, *seconds, chunk, now))
        });
        futures::future::join_all(calls).await;
    }

    async fn extend(&self, queue: usize, seconds: u64, chunk: &[(Ticket, Receipt)], now: std::time::Instant) {
        let q = &self.queues[queue];
        let entries: Vec<_> = chunk
            .iter()
            .filter_map(|(t, r)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(t.to_string())
                    .receipt_handle(&r.handle)
                    .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
                    .build()
                    .ok()
            })
            .collect();
        let answer = q
            .client
            .change_message_visibility_batch()
            .queue_url(q.url.as_ref())
            .set_entries(Some(entries))
            .send()
            .await;
        let failed: Vec<String> = match answer {
            Ok(out) => out
                .failed
                .into_iter()
                .map(|f| {
                    ExtendFailed { queue_url: &q.url, code: &f.code, entries: 1 }.emit(&self.metrics);
                    f.id
                })
                .collect(),
            Err(e) => {
                ExtendFailed { queue_url: &q.url, code: &error_type(&e), entries: 1 }.emit(&self.metrics);
                return;
            }
        };
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        for (ticket, _) in chunk {
            if !failed.contains(&ticket.to_string()) {
                ledger.extended(*ticket, now);
            }
        }
    }
}
