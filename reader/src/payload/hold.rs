//! Holding a message whose payload fetch failed for S3's fault, and fetching it again.
//!
//! Why: a fault that is not the message's never costs it an SQS receive (README, "When a sink
//! fails"). Released to the queue, a message whose object S3 could not serve for a while would
//! come back with a growing receive count and reach the queue's dead-letter queue after
//! `maxReceiveCount` receives, so an S3 outage would dead-letter every message it touched.
//! Instead the message stays in the ledger (the heartbeat keeps it invisible) and in the poller's
//! claim (it counts against what the reader holds), and its fetch is tried again after a backoff
//! of 1 s doubling to 30 s, jittered (the sink hold's: `process::backoff::hold_backoff`),
//! without limit while the reader runs. A permanent failure (missing, denied, too large) is not
//! retried: it stays poison, for the dead-letter route.
//!
//! Why in the poller and not in a delivery task: the fetch is part of taking a message in (its
//! outcome decides whether it is delivered, dead-lettered or acknowledged), and a poller that is
//! waiting for S3 does not receive. That is what an S3 outage calls for: every message received
//! meanwhile would only be held too, so receiving pauses by itself (one batch per poller at
//! most) and resumes the moment S3 answers. A stop does not wait for S3: the wait and the fetch
//! in flight are both dropped the moment the reader stops, and the message is handed back at
//! once, so a poller stuck here never holds up the drain.

use std::time::{Duration, Instant};

use super::events::FetchHeld;
use super::{Resolution, Resolver};
use crate::aws::visibility::HOLD_LIMIT;
use crate::process::backoff::{LONGEST_HOLD_RETRY, hold_backoff};
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;
use crate::record::Record;

/// Resolve `record`, holding it through transient fetch failures (see the module). Answers
/// `Resolution::Release` only when the reader stops, or when the hold since `received` nears
/// SQS's 12 h visibility cap ([`HOLD_LIMIT`]).
pub async fn resolve(
    resolver: &Resolver,
    record: Record,
    received: Instant,
    stop: &Stop,
    metrics: &Metrics,
) -> Resolution {
    let mut delays = hold_backoff();
    loop {
        // A fetch replaces parts of the record: each attempt starts from the message as received.
        let attempt = tokio::select! {
            biased;
            () = stop.stopped() => return stopped(record),
            resolution = resolver.resolve(record.clone()) => resolution,
        };
        let reason = match attempt {
            Resolution::Release(_, reason) => reason,
            done => return done,
        };
        let delay = delays.next().unwrap_or(LONGEST_HOLD_RETRY);
        let handing_back = past_cap(received.elapsed(), delay);
        FetchHeld { reason: &reason, handing_back }.emit(metrics);
        if handing_back {
            return Resolution::Release(record, reason);
        }
        tokio::select! {
            biased;
            () = stop.stopped() => return stopped(record),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn stopped(record: Record) -> Resolution {
    Resolution::Release(record, "the reader is stopping".to_owned())
}

/// Whether waiting `delay` more would keep a message held `held` so far past [`HOLD_LIMIT`].
fn past_cap(held: Duration, delay: Duration) -> bool {
    held + delay >= HOLD_LIMIT
}

#[cfg(test)]
#[path = "hold_tests.rs"]
mod tests;
