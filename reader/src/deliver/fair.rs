//! Turns at the sinks by message group: the deliveries of a standard queue waiting for a slot
//! are let through round-robin by `MessageGroupId`, not in the order they were received.
//!
//! Why here: under a slow sink or a rate limit, what a reader holds waits for the sink's
//! concurrency, and a semaphore serves waiters in arrival order, so a tenant that sent twenty
//! times as much fills the line and another tenant's message waits behind all of it. SQS fair
//! queues (a `MessageGroupId` on a standard queue marks a tenant) keep one tenant from starving
//! the others on SQS's side; this keeps the reader from undoing that on its own. The slots are
//! as many as the tightest per-record sink takes at once, so the sink's own limit never queues
//! and the order chosen here is the order served. FIFO queues do not come here: their order
//! within a group is the sink's to keep (`fifo`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

use crate::process::metrics::{GroupLabel, Metrics, OTHER_GROUPS};

/// Groups with a series of their own in the metrics; the rest are summed.
const TOP_GROUPS: usize = 5;

/// Delivery slots shared round-robin among the groups waiting for one.
pub struct GroupTurns {
    state: Mutex<State>,
    metrics: Option<Arc<Metrics>>,
}

#[derive(Debug, Default)]
struct State {
    free: usize,
    /// Waiters per group, oldest first, with when each began to wait.
    waiting: HashMap<String, VecDeque<(Instant, oneshot::Sender<()>)>>,
    /// Groups with waiters, in the order their turn comes.
    order: VecDeque<String>,
}

impl State {
    /// (group, waiting, since when the oldest waits) for the top groups by waiting, then the
    /// rest summed under [`OTHER_GROUPS`].
    fn top(&self) -> Vec<(String, usize, Instant)> {
        let mut each: Vec<(String, usize, Instant)> = self
            .waiting
            .iter()
            .filter_map(|(g, q)| q.front().map(|(at, _)| (g.clone(), q.len(), *at)))
            .collect();
        each.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        if each.len() > TOP_GROUPS {
            let rest = each.split_off(TOP_GROUPS);
            let count = rest.iter().map(|r| r.1).sum();
            let oldest = rest.iter().map(|r| r.2).min().unwrap_or_else(Instant::now);
            each.push((OTHER_GROUPS.to_owned(), count, oldest));
        }
        each
    }
}

/// A delivery slot; given back (to the next group in turn) when dropped.
pub struct Turn {
    turns: Arc<GroupTurns>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.hand_on();
    }
}

/// Waiting for a turn; if dropped after the turn was handed to it, gives the slot back.
struct Waiting {
    rx: Option<oneshot::Receiver<()>>,
    turns: Arc<GroupTurns>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.turns.hand_on();
            }
        }
    }
}

impl GroupTurns {
    /// `slots` deliveries at once (at least 1); waits published to `metrics` when given.
    pub fn new(slots: usize, metrics: Option<Arc<Metrics>>) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State { free: slots.max(1), ..State::default() }), metrics })
    }

    /// The waits per group into the gauges: the top groups' series and the rest's, nothing else.
    fn publish(&self, state: &State) {
        let Some(metrics) = &self.metrics else { return };
        metrics.fair_waiting.clear();
        metrics.fair_oldest_wait.clear();
        let now = Instant::now();
        for (group, waiting, since) in state.top() {
            let label = GroupLabel { group };
            metrics.fair_waiting.get_or_create(&label).set(i64::try_from(waiting).unwrap_or(i64::MAX));
            metrics.fair_oldest_wait.get_or_create(&label).set(now.duration_since(since).as_secs_f64());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot for a message of `group` (`""`: no group).
    pub async fn turn(self: &Arc<Self>, group: &str) -> Turn {
        let rx = {
            let mut s = self.lock();
            if s.free > 0 && s.order.is_empty() {
                s.free -= 1;
                return Turn { turns: self.clone() };
            }
            let (tx, rx) = oneshot::channel();
            let queue = s.waiting.entry(group.to_owned()).or_default();
            queue.push_back((Instant::now(), tx));
            if queue.len() == 1 {
                s.order.push_back(group.to_owned());
            }
            self.publish(&s);
            rx
        };
        let mut waiting = Waiting { rx: Some(rx), turns: self.clone() };
        if let Some(rx) = waiting.rx.as_mut() {
            // The sender lives in the state until it is sent on: an error cannot happen.
            let _ = rx.await;
        }
        waiting.rx = None;
        Turn { turns: self.clone() }
    }

    /// A slot came free: to the first waiter of the group whose turn it is (that group goes to
    /// the back of the line if it has more), else kept free.
    fn hand_on(&self) {
        let mut s = self.lock();
        while let Some(group) = s.order.pop_front() {
            let Some(queue) = s.waiting.get_mut(&group) else { continue };
            let next = queue.pop_front();
            if queue.is_empty() {
                s.waiting.remove(&group);
            } else {
                s.order.push_back(group);
            }
            if let Some((_, tx)) = next
                && tx.send(()).is_ok()
            {
                self.publish(&s);
                return;
            }
        }
        s.free += 1;
        self.publish(&s);
    }

    /// Deliveries waiting for a slot, per group (for the metrics).
    pub fn waiting(&self) -> Vec<(String, usize)> {
        self.lock().waiting.iter().map(|(g, q)| (g.clone(), q.len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One slot; a noisy group queues 20 deliveries before a quiet one queues 2: the quiet ones
    /// go second and fourth, not 21st and 22nd.
    #[tokio::test]
    async fn groups_take_turns_whatever_arrived_first() {
        let metrics = Arc::new(Metrics::new());
        let turns = GroupTurns::new(1, Some(metrics.clone()));
        let first = turns.turn("noisy").await;
        let served: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut tasks = Vec::new();
        for (group, n) in [("noisy", 20), ("quiet", 2)] {
            for i in 0..n {
                let (turns, served) = (turns.clone(), served.clone());
                let name = format!("{group}-{i}");
                let group = group.to_owned();
                tasks.push(tokio::spawn(async move {
                    let _turn = turns.turn(&group).await;
                    served.lock().unwrap().push(name);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }));
                // Queued in this order.
                tokio::task::yield_now().await;
            }
        }
        let waiting =
            |group: &str| metrics.fair_waiting.get_or_create(&GroupLabel { group: group.into() }).get();
        assert_eq!((waiting("noisy"), waiting("quiet")), (20, 2));
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        let served = served.lock().unwrap().clone();
        assert_eq!(&served[..4], ["noisy-0", "quiet-0", "noisy-1", "quiet-1"], "{served:?}");
        assert_eq!(served.len(), 22);
        assert_eq!(waiting("noisy"), 0, "nothing waits any more");
    }

    /// Seven groups waiting: five series of their own, the other two summed.
    #[tokio::test]
    async fn the_metrics_name_the_top_groups_and_sum_the_rest() {
        let metrics = Arc::new(Metrics::new());
        let turns = GroupTurns::new(1, Some(metrics.clone()));
        let _held = turns.turn("x").await;
        let mut waiters = Vec::new();
        for (g, n) in [("a", 7), ("b", 6), ("c", 5), ("d", 4), ("e", 3), ("f", 2), ("g", 1)] {
            for _ in 0..n {
                let turns = turns.clone();
                waiters.push(tokio::spawn(async move { drop(turns.turn(g).await) }));
                tokio::task::yield_now().await;
            }
        }
        let waiting =
            |group: &str| metrics.fair_waiting.get_or_create(&GroupLabel { group: group.into() }).get();
        assert_eq!([waiting("a"), waiting("e"), waiting(OTHER_GROUPS)], [7, 3, 3]);
        for w in waiters {
            w.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_no_slot() {
        let turns = GroupTurns::new(1, None);
        let held = turns.turn("a").await;
        let gave_up = tokio::time::timeout(Duration::from_millis(10), turns.turn("b")).await;
        assert!(gave_up.is_err());
        drop(held);
        // The slot is free again: a new turn comes at once.
        let again = tokio::time::timeout(Duration::from_millis(100), turns.turn("c")).await;
        assert!(again.is_ok(), "the slot was lost");
        assert!(turns.waiting().is_empty());
    }
}
