//! Wake-ups at a given instant, to within the OS's timer slack (tens of microseconds) rather than
//! tokio's millisecond ticks, for the latency proxy.
//!
//! Why: tokio's timer rounds a deadline up to the next millisecond tick and parks in
//! `epoll_wait`, whose timeout is whole milliseconds too, so a sleep ends 0-2 ms late, about 1 ms
//! on average. The proxy sleeps once per chunk and per direction, so a request/answer pair
//! through a "5 ms" proxy took 7 ms before the machine's load added anything: the bench measured
//! the timer, not the consumer. Here one thread per process keeps the deadlines in order and
//! sleeps on a condition variable (a futex with a high-resolution timeout) until the first one,
//! then wakes its task through a oneshot channel.
//!
//! Only a few hundred deadlines a second in flight: one thread is plenty, and it sleeps between.

use std::collections::BTreeMap;
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

/// Deadlines waiting, by (instant, sequence number), each with the task to wake (told when it
/// was woken).
#[derive(Default)]
struct Deadlines {
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<Instant>>,
    next_seq: u64,
}

struct Timer {
    deadlines: Mutex<Deadlines>,
    changed: Condvar,
}

static TIMER: LazyLock<&'static Timer> = LazyLock::new(|| {
    let timer: &'static Timer =
        Box::leak(Box::new(Timer { deadlines: Mutex::default(), changed: Condvar::new() }));
    std::thread::Builder::new()
        .name("precise-timer".into())
        .spawn(move || timer.run())
        .expect("spawn the precise timer thread");
    timer
});

impl Timer {
    fn run(&self) {
        let mut deadlines = self.deadlines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            while let Some(entry) = deadlines.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                // The waiting task may have been dropped (its connection closed): nothing to wake.
                let _ = entry.remove().send(Instant::now());
            }
            let first = deadlines.waiting.first_key_value().map(|(&(at, _), _)| at);
            deadlines = match first {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.changed.wait_timeout(deadlines, wait).unwrap_or_else(|e| e.into_inner()).0
                }
                None => self.changed.wait(deadlines).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// Completes at `at` (or at once if it is past), a few tens of microseconds late at most on an
/// idle machine. Answers when the timer thread fired: what is late beyond that is the wait for
/// the task's runtime to poll it again.
pub async fn sleep_until(at: Instant) -> Instant {
    let now = Instant::now();
    if at <= now {
        return now;
    }
    let (wake, woken) = oneshot::channel();
    let timer = *TIMER;
    {
        let mut deadlines = timer.deadlines.lock().unwrap_or_else(|e| e.into_inner());
        let seq = deadlines.next_seq;
        deadlines.next_seq += 1;
        let first = deadlines.waiting.first_key_value().is_none_or(|(&(next, _), _)| at < next);
        deadlines.waiting.insert((at, seq), wake);
        if first {
            timer.changed.notify_one();
        }
    }
    woken.await.unwrap_or_else(|_| Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Many sleeps, out of order: each ends at or after its own deadline, and all of them end.
    #[tokio::test]
    async fn every_sleep_ends_at_or_after_its_deadline() {
        let start = Instant::now();
        let sleeps = (0..50u64).map(|i| {
            let at = start + Duration::from_micros((i * 7_919) % 20_000 + 500);
            tokio::spawn(async move {
                let fired = sleep_until(at).await;
                fired >= at && Instant::now() >= fired
            })
        });
        for sleep in sleeps {
            assert!(sleep.await.unwrap(), "a sleep ended before its deadline");
        }
        sleep_until(start).await;
    }
}
