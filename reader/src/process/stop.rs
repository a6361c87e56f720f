//! Why the reader stops: a signal (drain, exit 0) or failOnError (exit 3), told once to everyone.
//!
//! Why a type: pollers only need "stop receiving", but the process must remember the first
//! reason so `main` can pick the exit code after the drain, whoever noticed it first.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::process::error::Error;

#[derive(Clone, Default)]
pub struct Stop {
    token: CancellationToken,
    failure: Arc<Mutex<Option<Error>>>,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stop receiving and drain (SIGTERM, SIGINT).
    pub fn drain(&self) {
        self.token.cancel();
    }

    /// Stop because of `error`; the first failure is the one reported.
    pub fn fail(&self, error: Error) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_none() {
            *failure = Some(error);
        }
        self.token.cancel();
    }

    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    pub async fn stopped(&self) {
        self.token.cancelled().await
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Stopped by a failure (failOnError), not a drain.
    pub fn has_failed(&self) -> bool {
        self.failure.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The failure that stopped the reader, if it was not a plain drain.
    pub fn take_failure(&self) -> Option<Error> {
        self.failure.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_wins() {
        let stop = Stop::new();
        assert!(!stop.is_stopped());
        stop.fail(Error::FailOnError { message_id: "a".into(), reason: "400".into() });
        stop.fail(Error::Other("later".into()));
        assert!(stop.is_stopped() && stop.has_failed());
        assert_eq!(stop.take_failure().map(|e| e.exit_code()), Some(3));
    }

    #[test]
    fn a_drain_has_no_failure() {
        let stop = Stop::new();
        stop.drain();
        assert!(stop.is_stopped());
        assert!(stop.take_failure().is_none());
    }
}
