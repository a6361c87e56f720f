//! The reader's one backoff policy for calls that are retried until they succeed or the reader
//! stops: exponential with jitter (backon), between a first and a largest delay.
//!
//! Why one place: every retried call (a receive, a delete batch, a sink's epoch step, a lease
//! take-over) must back off the same way, with jitter so that many readers spread apart, and never
//! spin. Sinks' per-record retries are the exception: they follow the user's `delivery.retry`
//! (see `sink::retry`).

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use tokio_util::sync::CancellationToken;

/// The first wait before a held message is tried again (its delivery failed for a sink's fault,
/// or its payload's fetch failed for S3's), doubling (jittered) to the longest: a message held
/// for a fault that is not its own is retried in-process, never spending an SQS receive.
pub const FIRST_HOLD_RETRY: Duration = Duration::from_secs(1);
pub const LONGEST_HOLD_RETRY: Duration = Duration::from_secs(30);

/// The delays between a held message's attempts (see [`FIRST_HOLD_RETRY`]), without end.
pub fn hold_backoff() -> impl Iterator<Item = Duration> + Send {
    backoff(FIRST_HOLD_RETRY, LONGEST_HOLD_RETRY)
}

/// Delays from `first`, doubling up to `largest`, jittered, without end.
pub fn backoff(first: Duration, largest: Duration) -> impl Iterator<Item = Duration> + Send {
    builder(first, largest).without_max_times().build()
}

fn builder(first: Duration, largest: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default().with_min_delay(first).with_max_delay(largest).with_jitter()
}

/// Calls `call` until it succeeds, backing off between attempts (see [`backoff`]); `on_error` sees
/// each failure and answers whether to go on. `None` when `on_error` said stop or `stop` fired.
/// `attempts` bounds the number of calls (`None`: no bound).
pub async fn retry<T, E, F, Fut>(
    first: Duration,
    largest: Duration,
    attempts: Option<usize>,
    stop: &CancellationToken,
    call: F,
    mut on_error: impl FnMut(&E) -> bool,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let policy = match attempts {
        Some(n) => builder(first, largest).with_max_times(n.saturating_sub(1)),
        None => builder(first, largest).without_max_times(),
    };
    let attempt = call.retry(policy).sleep(tokio::time::sleep).when(|e| on_error(e));
    tokio::select! {
        result = attempt => result.ok(),
        () = stop.cancelled() => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn delays_grow_within_bounds_and_never_end() {
        let delays: Vec<Duration> =
            backoff(Duration::from_millis(200), Duration::from_secs(20)).take(40).collect();
        assert_eq!(delays.len(), 40);
        assert!(delays[0] >= Duration::from_millis(200));
        // Jitter adds up to one more delay on top.
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(40)));
        assert!(delays[39] >= Duration::from_secs(20));
    }

    #[tokio::test]
    async fn retries_until_success() {
        let calls = AtomicUsize::new(0);
        let stop = CancellationToken::new();
        let answer = retry(
            Duration::from_millis(1),
            Duration::from_millis(2),
            None,
            &stop,
            || async {
                let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
                if n < 3 { Err(n) } else { Ok(n) }
            },
            |_| true,
        )
        .await;
        assert_eq!(answer, Some(3));
    }

    #[tokio::test]
    async fn stops_when_told_or_out_of_attempts() {
        let stop = CancellationToken::new();
        let calls = AtomicUsize::new(0);
        let failing = || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>("no")
        };
        let ms = Duration::from_millis(1);
        assert_eq!(retry(ms, ms, Some(3), &stop, failing, |_| true).await, None);
        assert_eq!(calls.swap(0, Ordering::Relaxed), 3);
        assert_eq!(retry(ms, ms, None, &stop, failing, |_| false).await, None);
        assert_eq!(calls.swap(0, Ordering::Relaxed), 1);
        stop.cancel();
        assert_eq!(retry(ms, ms, None, &stop, failing, |_| true).await, None);
    }
}
