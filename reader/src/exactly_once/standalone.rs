//! In-process coordination for a reader without a cluster: the operator's coordinator step runs
//! here, over a checkpoint and a lease kept in memory, with this reader as the only member.
//!
//! Why the same step and not a simpler timer: standalone mode then exercises the very decisions a
//! cluster makes (admission, open, commit on ack), so what passes standalone passes for the same
//! reasons under an operator. The lease cannot be lost in-process, so fencing never happens here.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use sluice_protocol::coordinator::{self, Clock, LeaseView};
use sluice_protocol::now_ms;
use sluice_protocol::{Checkpoint, Epoch, IdSet, Incarnation, Lease, Redelivery, classify, rejoin};
use tokio_util::sync::CancellationToken;

use super::{Backend, CoordinationError, Entries, Observed, Result};

/// How often the in-process coordinator looks at the clock, at most.
const MAX_TICK: Duration = Duration::from_millis(100);

struct Books {
    checkpoint: Checkpoint,
    lease: Lease,
}

/// The in-process backend.
pub struct Standalone {
    pod: String,
    interval_ms: i64,
    books: Mutex<Books>,
    observed: Observed,
}

impl Standalone {
    /// Starts the in-process coordinator for `pod`, opening an epoch every `interval`, until `stop`.
    pub fn start(pod: &str, interval: Duration, stop: CancellationToken) -> Arc<Self> {
        let now = now_ms();
        let backend = Arc::new(Standalone {
            pod: pod.to_owned(),
            interval_ms: interval.as_millis().max(1) as i64,
            books: Mutex::new(Books {
                checkpoint: Checkpoint::initial(now),
                lease: Lease::new(pod, Incarnation::generate(), now, 3600),
            }),
            observed: Observed::default(),
        });
        backend.step();
        let ticker = backend.clone();
        let tick = (interval / 4).min(MAX_TICK).max(Duration::from_millis(1));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(tick) => ticker.step(),
                }
            }
        });
        backend
    }

    fn lock(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One coordinator step; publishes the checkpoint when it changed. The in-process lease is
    /// renewed by being alive.
    fn step(&self) {
        let mut books = self.lock();
        let now = now_ms();
        books.lease.renewed_at_ms = now;
        let view = LeaseView::of(&books.lease, now, 0);
        let step = coordinator::step(
            &books.checkpoint,
            &[view],
            Clock { now_ms: now, interval_ms: self.interval_ms },
        );
        if !step.actions.is_empty() {
            books.checkpoint = step.checkpoint;
        }
        let current = books.checkpoint.clone();
        self.observed.checkpoint(current);
    }

    /// The lease as it stands (tests, diagnostics).
    pub fn lease(&self) -> Lease {
        self.lock().lease.clone()
    }
}

impl Backend for Standalone {
    fn lease_valid_until_ms(&self) -> i64 {
        // The in-process lease cannot be lost.
        i64::MAX
    }

    fn leave(&self) -> BoxFuture<'_, Result<()>> {
        async { Ok(()) }.boxed()
    }

    fn pod(&self) -> &str {
        &self.pod
    }

    fn incarnation(&self) -> Incarnation {
        self.lock().lease.incarnation
    }

    fn observed(&self) -> &Observed {
        &self.observed
    }

    fn write_ack(
        &self,
        incarnation: Incarnation,
        through: Epoch,
        entries: Vec<(Epoch, IdSet)>,
    ) -> BoxFuture<'_, Result<()>> {
        {
            let mut books = self.lock();
            if books.lease.incarnation != incarnation {
                return async { Err(CoordinationError::Conflict) }.boxed();
            }
            books.lease.acked_epoch = through;
            for (epoch, ids) in entries {
                books.lease.ids.insert((incarnation, epoch), ids);
            }
        }
        // Commit at once rather than at the next tick: the ack was the last thing missing.
        self.step();
        async { Ok(()) }.boxed()
    }

    fn forget(&self, incarnation: Incarnation, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        self.lock().lease.ids.remove(&(incarnation, epoch));
        async { Ok(()) }.boxed()
    }

    fn rejoin(&self) -> BoxFuture<'_, Result<(Incarnation, Entries)>> {
        let mut books = self.lock();
        let incarnation = Incarnation::generate();
        let (lease, _) = rejoin(&books.checkpoint, &books.lease, incarnation, now_ms());
        let inherited = lease.ids.clone();
        books.lease = lease;
        drop(books);
        self.observed.set_lost(false);
        async move { Ok((incarnation, inherited)) }.boxed()
    }

    fn classify(&self, id: &str, _receive_count: u32) -> BoxFuture<'_, Result<Redelivery>> {
        let books = self.lock();
        let verdict = classify(id, &books.checkpoint, [&books.lease]);
        async move { Ok(verdict) }.boxed()
    }

    fn visibility_covered_until(&self, _until_ms: i64) {
        // No other reader can receive this reader's messages: nothing to keep in step with.
    }

    fn report(&self, drain_millis_per_second: u64, in_flight: u64, draining: bool) {
        let mut books = self.lock();
        books.lease.drain_millis_per_second = drain_millis_per_second;
        books.lease.in_flight = in_flight;
        books.lease.draining = draining;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Driver, Work};
    use super::*;

    async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Work>) -> Work {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("work in time").expect("open")
    }

    #[tokio::test]
    async fn an_epoch_goes_from_tag_to_delete_in_process() {
        let stop = CancellationToken::new();
        let backend = Standalone::start("solo", Duration::from_millis(50), stop.clone());
        let (driver, mut work) = Driver::start(backend.clone(), &Entries::new(), stop.clone());

        // Admission happens on the first steps; then messages are tagged with the open epoch.
        let epoch = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(e) = driver.tag() {
                    return e;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("admitted in time");
        assert_eq!(driver.classify("m-1", 1).await.unwrap(), Redelivery::Fresh);
        let incarnation = driver.incarnation();
        driver.settled(incarnation, epoch, "m-1", true);
        // An answer for another incarnation (one that is over) moves nothing.
        driver.settled(Incarnation(incarnation.0 ^ 1), epoch, "m-2", true);

        let own = sluice_protocol::EpochKey { pod: "solo".into(), incarnation, epoch };
        assert_eq!(next(&mut work).await, Work::PreCommit(own.clone()));
        driver.pre_committed(&own);
        let Work::Commit(key) = next(&mut work).await else { panic!("commit expected") };
        assert_eq!(key, own);
        // Acked and committed: a redelivery of m-1 is now deleted, not delivered.
        assert!(matches!(driver.classify("m-1", 2).await.unwrap(), Redelivery::Committed(_)));
        driver.sink_committed(&own);
        let ids: IdSet = ["m-1".to_string()].into();
        assert_eq!(next(&mut work).await, Work::Delete { key: own.clone(), ids: ids.clone() });
        driver.deleted(&own, &ids);

        tokio::time::timeout(Duration::from_secs(5), async {
            while !backend.lease().ids.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("ids forgotten after the confirmed delete");
        assert_eq!(driver.classify("m-1", 3).await.unwrap(), Redelivery::Fresh);
        stop.cancel();
    }

    #[tokio::test]
    async fn figures_are_published_in_the_lease() {
        let stop = CancellationToken::new();
        let backend = Standalone::start("solo", Duration::from_secs(1), stop.clone());
        backend.report(2_500, 7, true);
        let lease = backend.lease();
        assert_eq!((lease.drain_millis_per_second, lease.in_flight, lease.draining), (2_500, 7, true));
        stop.cancel();
    }
}
