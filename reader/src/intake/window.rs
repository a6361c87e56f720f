//! The batching window (`spec.receive.batchWindowMilliseconds`): on a quiet queue, fewer and
//! fuller receives.
//!
//! Why: a long poll returns as soon as one message is there, so at a trickle every receive brings
//! one message and every delete goes out alone: about two requests per message, ten times the
//! floor of full batches, and SQS bills per request. Waiting before the next receive lets
//! messages gather; but a queue with several pollers out on long polls would still hand each
//! message to whichever poll is waiting. So a part-full receive makes the queue quiet: its pollers
//! take turns, one receive out at a time, and the one whose turn it is waits out the window after
//! a part-full receive. A full batch is never delayed: after one, the next receive goes at once,
//! and if that one comes back full too, there is a backlog and the queue stops being quiet (every
//! poller receives freely again).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// A queue's batching state, shared by its pollers.
#[derive(Debug, Default)]
pub struct Quiet {
    quiet: AtomicBool,
    turn: Arc<Mutex<()>>,
}

/// What a poller holds while it is the one receiving on a quiet queue.
pub type Turn = OwnedMutexGuard<()>;

impl Quiet {
    /// Whether the queue's pollers take turns.
    pub fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed)
    }

    /// Wait until no other poller of the queue is receiving, then hold the turn.
    pub async fn take_turn(&self) -> Turn {
        self.turn.clone().lock_owned().await
    }

    /// A receive of this queue brought `received` of `max` messages; `waited`: it was sent
    /// after a pause. Answers how long the poller pauses before its next receive.
    pub fn after_receive(&self, window: Duration, received: usize, max: usize, waited: bool) -> Duration {
        let (quiet, pause) = decide(window, received, max, waited);
        self.quiet.store(quiet, Ordering::Relaxed);
        pause
    }
}

/// The decision as a value: (quiet afterwards, pause before the next receive).
fn decide(window: Duration, received: usize, max: usize, waited: bool) -> (bool, Duration) {
    if window.is_zero() {
        return (false, Duration::ZERO);
    }
    match received {
        // Nothing came in a whole long poll: no point waiting more, but one poll out is enough.
        0 => (true, Duration::ZERO),
        n if n < max => (true, window),
        // Full after a pause: the window filled it; go again at once, still taking turns.
        _ if waited => (true, Duration::ZERO),
        // Full without a pause: a backlog. Every poller receives.
        _ => (false, Duration::ZERO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_millis(200);

    #[test]
    fn off_never_pauses_nor_takes_turns() {
        assert_eq!(decide(Duration::ZERO, 1, 10, false), (false, Duration::ZERO));
    }

    #[test]
    fn a_part_full_receive_pauses_and_a_full_one_never_does() {
        assert_eq!(decide(W, 3, 10, false), (true, W));
        assert_eq!(decide(W, 10, 10, true), (true, Duration::ZERO));
        assert_eq!(decide(W, 10, 10, false), (false, Duration::ZERO));
        assert_eq!(decide(W, 0, 10, true), (true, Duration::ZERO));
    }

    #[tokio::test]
    async fn one_turn_at_a_time() {
        let q = Quiet::default();
        assert_eq!(q.after_receive(W, 1, 10, false), W);
        assert!(q.is_quiet());
        let first = q.take_turn().await;
        assert!(q.turn.clone().try_lock_owned().is_err());
        drop(first);
        assert!(q.turn.clone().try_lock_owned().is_ok());
    }
}
