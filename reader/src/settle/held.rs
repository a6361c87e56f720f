//! What a reader holds: messages received from SQS and not yet settled, in messages and bytes,
//! against a bound that pollers wait for.
//!
//! Why here, in settle: a message stops being held the moment the pipeline settles it (deleted,
//! released or dead-lettered), one by one, so the room a poller waits for comes back message by
//! message rather than when a whole receive batch is done. A poller claims a whole batch before
//! its receive (so a long poll never brings more than the bound allows), then keeps what arrived.
//! Nothing held, a poller always gets its batch, so a bound below one batch (or a single message
//! larger than the byte bound) still makes progress.

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// The bound in force: at most this many messages and body bytes held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub messages: usize,
    pub bytes: u64,
}

#[derive(Debug)]
struct State {
    /// Messages received and not yet settled.
    messages: usize,
    bytes: u64,
    /// Claimed for receives still on the wire (each claim a batch).
    reserved: usize,
    bound: Bound,
    /// Messages settled since the start, for the drain rate.
    settled: u64,
    /// A poller found no room since the last [`Held::take_saturated`].
    saturated: bool,
}

pub struct Held {
    state: Mutex<State>,
    room: Notify,
    /// `sluice_reader_held_{messages,bytes}`, kept exact on every change.
    gauges: Option<(Gauge, Gauge)>,
}

/// Figures for metrics and the bound's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figures {
    pub messages: usize,
    pub bytes: u64,
    pub bound: Bound,
    pub settled: u64,
}

impl Held {
    pub fn new(bound: Bound) -> Arc<Self> {
        Self::build(bound, None)
    }

    /// The same, keeping the gauges for held messages and bytes up to date.
    pub fn with_gauges(bound: Bound, messages: Gauge, bytes: Gauge) -> Arc<Self> {
        Self::build(bound, Some((messages, bytes)))
    }

    fn build(bound: Bound, gauges: Option<(Gauge, Gauge)>) -> Arc<Self> {
        let state = State { messages: 0, bytes: 0, reserved: 0, bound, settled: 0, saturated: false };
        Arc::new(Self { state: Mutex::new(state), room: Notify::new(), gauges })
    }

    fn publish(&self, s: &State) {
        if let Some((messages, bytes)) = &self.gauges {
            messages.set(s.messages as i64);
            bytes.set(i64::try_from(s.bytes).unwrap_or(i64::MAX));
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Change the bound; pollers waiting see a larger one at once. What is already held above a
    /// smaller one stays (it settles in time); no new batch is claimed until below it.
    pub fn set_bound(&self, bound: Bound) {
        self.lock().bound = bound;
        self.room.notify_waiters();
    }

    pub fn figures(&self) -> Figures {
        let s = self.lock();
        Figures { messages: s.messages, bytes: s.bytes, bound: s.bound, settled: s.settled }
    }

    /// Whether a poller waited for room since the last call (the drain then shows what the reader
    /// can deliver, not how fast work arrives).
    pub fn take_saturated(&self) -> bool {
        std::mem::take(&mut self.lock().saturated)
    }

    /// Claim room for a receive of up to `batch` messages, waiting until there is some.
    pub async fn claim(self: &Arc<Self>, batch: usize) -> Claim {
        loop {
            let notified = self.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(claim) = self.try_claim(batch) {
                return claim;
            }
            notified.await;
        }
    }

    /// Claim room for `batch` messages now, if the bound allows it.
    pub fn try_claim(self: &Arc<Self>, batch: usize) -> Option<Claim> {
        let mut s = self.lock();
        let taken = s.messages + s.reserved;
        let fits = taken + batch <= s.bound.messages && s.bytes < s.bound.bytes;
        if !fits && taken > 0 {
            s.saturated = true;
            return None;
        }
        s.reserved += batch;
        Some(Claim { held: self.clone(), reserved: batch, messages: 0, bytes: 0 })
    }

    fn give_back(&self, reserved: usize, messages: usize, bytes: u64) {
        {
            let mut s = self.lock();
            s.reserved -= reserved;
            s.messages -= messages;
            s.bytes -= bytes;
            s.settled += messages as u64;
            self.publish(&s);
        }
        self.room.notify_waiters();
    }
}

/// Room claimed by one poller: first for a receive on the wire, then for the messages it kept.
/// Dropped, it gives back whatever it still holds (as settled: a message handed back to the
/// queue no longer waits on this reader).
pub struct Claim {
    held: Arc<Held>,
    reserved: usize,
    messages: usize,
    bytes: u64,
}

impl Claim {
    /// The receive landed: hold `messages` messages of `bytes` body bytes, give back the rest.
    pub fn keep(&mut self, messages: usize, bytes: u64) {
        let reserved = std::mem::take(&mut self.reserved);
        {
            let mut s = self.held.lock();
            s.reserved -= reserved;
            s.messages += messages;
            s.bytes += bytes;
            self.held.publish(&s);
        }
        self.messages += messages;
        self.bytes += bytes;
        if reserved > messages {
            self.held.room.notify_waiters();
        }
    }

    /// One message of `bytes` body bytes is settled.
    pub fn settle_one(&mut self, bytes: u64) {
        if self.messages == 0 {
            return;
        }
        let bytes = bytes.min(self.bytes);
        self.messages -= 1;
        self.bytes -= bytes;
        self.held.give_back(0, 1, bytes);
    }

    /// Messages this claim still holds.
    pub fn messages(&self) -> usize {
        self.messages
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.reserved > 0 || self.messages > 0 {
            self.held.give_back(self.reserved, self.messages, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bound(messages: usize, bytes: u64) -> Bound {
        Bound { messages, bytes }
    }

    #[test]
    fn a_batch_is_claimed_only_while_it_fits() {
        let held = Held::new(bound(25, 1 << 20));
        let mut a = held.try_claim(10).expect("room");
        let _b = held.try_claim(10).expect("room");
        assert!(held.try_claim(10).is_none(), "30 > 25");
        assert!(held.take_saturated());
        a.keep(3, 300);
        let _c = held.try_claim(10).expect("3 + 10 + 10 fits");
        assert_eq!(held.figures().messages, 3);
        assert_eq!(held.figures().bytes, 300);
    }

    #[test]
    fn nothing_held_a_batch_always_passes() {
        let held = Held::new(bound(1, 10));
        let mut a = held.try_claim(10).expect("nothing held");
        a.keep(10, 5_000);
        assert!(held.try_claim(1).is_none());
        for _ in 0..10 {
            a.settle_one(500);
        }
        assert_eq!(held.figures().messages, 0);
        assert_eq!(held.figures().bytes, 0);
        assert!(held.try_claim(10).is_some());
    }

    #[test]
    fn bytes_bound_stops_claims() {
        let held = Held::new(bound(100, 1000));
        let mut a = held.try_claim(10).unwrap();
        a.keep(2, 1000);
        assert!(held.try_claim(1).is_none(), "the byte bound is reached");
        a.settle_one(600);
        assert!(held.try_claim(1).is_some());
    }

    #[test]
    fn dropping_a_claim_gives_everything_back_and_counts_it_settled() {
        let held = Held::new(bound(10, 1 << 20));
        let mut a = held.try_claim(10).unwrap();
        a.keep(4, 40);
        a.settle_one(10);
        drop(a);
        let f = held.figures();
        assert_eq!((f.messages, f.bytes, f.settled), (0, 0, 4));
    }

    #[tokio::test]
    async fn a_waiting_poller_resumes_as_messages_settle() {
        let held = Held::new(bound(10, 1 << 20));
        let mut a = held.try_claim(10).unwrap();
        a.keep(10, 100);
        let waiter = tokio::spawn({
            let held = held.clone();
            async move { held.claim(5).await.reserved }
        });
        tokio::task::yield_now().await;
        for _ in 0..4 {
            a.settle_one(10);
        }
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "6 held + 5 > 10");
        a.settle_one(10);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        assert_eq!(got, 5);
    }

    #[tokio::test]
    async fn a_larger_bound_wakes_waiters() {
        let held = Held::new(bound(10, 1 << 20));
        let mut a = held.try_claim(10).unwrap();
        a.keep(10, 100);
        let waiter = tokio::spawn({
            let held = held.clone();
            async move { held.claim(10).await.reserved }
        });
        tokio::task::yield_now().await;
        held.set_bound(bound(20, 1 << 20));
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        assert_eq!(got, 10);
    }
}
