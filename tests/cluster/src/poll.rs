//! Waiting for a condition of the running system: look, sleep, look again, give up after a bound.
//!
//! Why one helper: every suite waits for something (readers ready, a queue empty, a Deployment gone),
//! and a hand-written loop each time repeats the clock arithmetic and tends to lose what it last saw.
//! Here the check says what it saw when the condition does not hold yet, and the error after the bound
//! is that last sight, so a failed wait reads like an assertion message.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// What one look at the condition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<T> {
    /// The condition holds, with what the caller wanted from it.
    Met(T),
    /// Not yet: what was seen instead, for the error if the bound passes.
    NotYet(String),
}

impl Check<()> {
    /// `Met` if `holds`, else `NotYet` with the description `seen` gives.
    pub fn met_if(holds: bool, seen: impl FnOnce() -> String) -> Self {
        if holds { Check::Met(()) } else { Check::NotYet(seen()) }
    }
}

/// Calls `check` every `every` until it returns `Met` (its value is returned), an error (returned at
/// once), or `timeout` passes: then the error is the last `NotYet` description and the time waited.
pub async fn until<T, F, Fut>(timeout: Duration, every: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Check<T>>>,
{
    let start = Instant::now();
    loop {
        let seen = match check().await? {
            Check::Met(value) => return Ok(value),
            Check::NotYet(seen) => seen,
        };
        if start.elapsed() > timeout {
            bail!("{seen} (waited {:.1} s)", start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(every).await;
    }
}

/// For tests: what `check` finds (`Some`), looked for every 100 ms; panics with "timed out waiting
/// for `what`" once `timeout` passes.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let found = until(timeout, Duration::from_millis(100), || {
        let look = check();
        async move {
            Ok(look.await.map_or_else(|| Check::NotYet(format!("timed out waiting for {what}")), Check::Met))
        }
    })
    .await;
    found.unwrap_or_else(|error| panic!("{error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_value_once_the_condition_holds() {
        let mut looks = 0;
        let value = until(Duration::from_secs(5), Duration::from_millis(1), || {
            looks += 1;
            let now = looks;
            async move { Ok(if now >= 3 { Check::Met(now * 10) } else { Check::NotYet(format!("{now}")) }) }
        })
        .await
        .unwrap();
        assert_eq!(value, 30);
    }

    #[tokio::test]
    async fn after_the_bound_the_error_is_the_last_sight() {
        let error = until(Duration::ZERO, Duration::from_millis(1), || async {
            Ok(Check::<()>::NotYet("queue holds 7 messages".into()))
        })
        .await
        .unwrap_err();
        assert!(error.to_string().starts_with("queue holds 7 messages (waited"), "{error}");
    }

    #[tokio::test]
    #[should_panic(expected = "timed out waiting for the greeting")]
    async fn eventually_panics_naming_what_never_came() {
        eventually("the greeting", Duration::ZERO, || async { None::<()> }).await;
    }

    #[tokio::test]
    async fn an_error_from_the_check_ends_the_wait() {
        let error = until(Duration::from_secs(60), Duration::from_millis(1), || async {
            Result::<Check<()>>::Err(anyhow::anyhow!("GetQueueAttributes failed"))
        })
        .await
        .unwrap_err();
        assert_eq!(error.to_string(), "GetQueueAttributes failed");
    }
}
