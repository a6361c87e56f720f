//! Runs a reader's `ReaderEpochs` against a [`Backend`]: feeds it checkpoint versions and lease
//! loss, carries out the lease writes and rejoins itself, and hands the rest to the worker as
//! [`Work`].
//!
//! Why the lease writes are done here and not by the pipeline: their results decide fencing
//! (a failed compare-and-swap means the lease is lost), which is this layer's business; the
//! pipeline only ever sees sink and SQS work.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_protocol::reader_epoch::{Command, ReaderEpochs, Standing};
use sluice_protocol::{Epoch, EpochKey, IdSet, Incarnation, Redelivery};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Backend, CoordinationError, Result, Work};
use crate::process::backoff::retry;

/// Backoff between attempts at rejoining (the previous incarnation must be fenced first).
const REJOIN_RETRY: Duration = Duration::from_secs(1);
const REJOIN_RETRY_LONGEST: Duration = Duration::from_secs(1);

/// The pipeline's handle on the protocol. Cheap to share (`Arc`).
pub struct Driver {
    backend: Arc<dyn Backend>,
    machine: Mutex<ReaderEpochs>,
    work: mpsc::UnboundedSender<Work>,
    stop: CancellationToken,
    draining: std::sync::atomic::AtomicBool,
}

impl Driver {
    /// Starts following `backend` until `stop`. `inherited`: committed entries of an earlier
    /// incarnation that the backend carried over when it took the lease (their output is made
    /// visible again, idempotently). The receiver yields the pipeline's work.
    pub fn start(
        backend: Arc<dyn Backend>,
        inherited: &BTreeMap<(Incarnation, Epoch), IdSet>,
        stop: CancellationToken,
    ) -> (Arc<Driver>, mpsc::UnboundedReceiver<Work>) {
        let incarnation = backend.incarnation();
        let (machine, commands) = ReaderEpochs::rejoined(backend.pod(), incarnation, inherited);
        let (work, rx) = mpsc::unbounded_channel();
        let driver = Arc::new(Driver {
            backend,
            machine: Mutex::new(machine),
            work,
            stop,
            draining: Default::default(),
        });
        driver.run(commands, incarnation);
        tokio::spawn(driver.clone().follow());
        (driver, rx)
    }

    /// The epoch to tag a fresh message with; `None`: do not receive now (joining, fenced, lease
    /// lost, draining).
    pub fn tag(&self) -> Option<Epoch> {
        self.lock().tag()
    }

    /// Whether receiving makes sense at all right now (the same conditions as [`Driver::tag`]).
    pub fn can_receive(&self) -> bool {
        self.lock().can_receive()
    }

    /// A message tagged `epoch` by `incarnation` is settled: delivered (or dead-lettered), or
    /// released to the queue. Ignored when that incarnation is over (its epoch is aborted).
    pub fn settled(self: &Arc<Self>, incarnation: Incarnation, epoch: Epoch, id: &str, delivered: bool) {
        self.apply_for(incarnation, |m| m.settled(epoch, id, delivered));
    }

    /// Answer to [`Work::PreCommit`].
    pub fn pre_committed(self: &Arc<Self>, key: &EpochKey) {
        self.apply_for(key.incarnation, |m| m.pre_committed(key.epoch));
    }

    /// Answer to [`Work::Commit`] for an own epoch.
    pub fn sink_committed(self: &Arc<Self>, key: &EpochKey) {
        self.apply_for(key.incarnation, |m| m.sink_committed(key.epoch));
    }

    /// Answer to [`Work::Delete`]: the ids whose delete is confirmed.
    pub fn deleted(self: &Arc<Self>, key: &EpochKey, confirmed: &IdSet) {
        self.apply_for(key.incarnation, |m| m.deleted(key.epoch, confirmed));
    }

    /// A redelivered message classified `Committed(key)` was deleted without delivery.
    pub fn redelivered_deleted(self: &Arc<Self>, key: &EpochKey, id: &str) {
        self.apply(|m| m.redelivered_deleted(key, id));
    }

    /// The tag for a fresh message: (incarnation, epoch), or `None` if it must not be received now.
    pub fn tag_with_incarnation(&self) -> Option<(Incarnation, Epoch)> {
        let mut machine = self.lock();
        let incarnation = machine.incarnation();
        machine.tag().map(|epoch| (incarnation, epoch))
    }

    /// What to do with a received message: deliver (`Fresh`, then [`Driver::tag`]), finalize and
    /// delete (`Committed`), or release (`Undecided`).
    pub async fn classify(&self, id: &str, receive_count: u32) -> Result<Redelivery> {
        self.backend.classify(id, receive_count).await
    }

    /// [`Driver::classify`] for a batch: one answer per `(id, receive count)`, in order.
    pub async fn classify_many(&self, items: Vec<(String, u32)>) -> Result<Vec<Redelivery>> {
        self.backend.classify_many(items).await
    }

    /// Stop receiving; tagged epochs still finish. See [`Driver::drained`].
    pub fn drain(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        self.lock().drain();
    }

    /// `drain` was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Draining and every epoch this incarnation tagged is finished (committed and deleted, or
    /// aborted). Committed entries carried over from an earlier incarnation may remain: they
    /// shrink only as their messages come back, which a draining reader no longer receives.
    pub fn own_epochs_done(&self) -> bool {
        let machine = self.lock();
        self.is_draining() && machine.stages().is_empty()
    }

    /// Draining and nothing of this incarnation left to do.
    pub fn drained(&self) -> bool {
        self.lock().drained()
    }

    pub fn standing(&self) -> Standing {
        self.lock().standing()
    }

    pub fn incarnation(&self) -> Incarnation {
        self.lock().incarnation()
    }

    /// Ids recorded or about to be; stop receiving at `LEASE_ID_BUDGET`.
    pub fn pending_ids(&self) -> usize {
        self.lock().pending_ids()
    }

    /// The backend, for `visibility_covered_until` and `report`.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    fn lock(&self) -> MutexGuard<'_, ReaderEpochs> {
        self.machine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn apply(self: &Arc<Self>, f: impl FnOnce(&mut ReaderEpochs) -> Vec<Command>) {
        let (commands, incarnation) = {
            let mut machine = self.lock();
            (f(&mut machine), machine.incarnation())
        };
        self.run(commands, incarnation);
    }

    /// Like `apply`, but only while `incarnation` is the current one: an answer for an
    /// incarnation that is over must not move its successor's epochs of the same number.
    fn apply_for(
        self: &Arc<Self>,
        incarnation: Incarnation,
        f: impl FnOnce(&mut ReaderEpochs) -> Vec<Command>,
    ) {
        let commands = {
            let mut machine = self.lock();
            if machine.incarnation() != incarnation {
                tracing::debug!(%incarnation, "answer for an incarnation that is over; ignored");
                return;
            }
            f(&mut machine)
        };
        self.run(commands, incarnation);
    }

    /// Carry out `commands`, produced by the machine of `incarnation`.
    fn run(self: &Arc<Self>, commands: Vec<Command>, incarnation: Incarnation) {
        let key = |epoch| EpochKey { pod: self.backend.pod().to_owned(), incarnation, epoch };
        for command in commands {
            let work = match command {
                Command::PreCommit(epoch) => Work::PreCommit(key(epoch)),
                Command::Commit(key) => Work::Commit(key),
                Command::Delete { epoch, ids } => Work::Delete { key: key(epoch), ids },
                Command::Abort(epoch) => Work::Abort(key(epoch)),
                Command::WriteAck { through, entries } => {
                    let me = self.clone();
                    tokio::spawn(async move {
                        match me.backend.write_ack(incarnation, through, entries).await {
                            Ok(()) => me.apply_for(incarnation, |m| m.ack_written(through)),
                            Err(error) => {
                                tracing::warn!(through, %error, "ack write failed; the lease counts as lost");
                                me.give_up_lease(incarnation);
                            }
                        }
                    });
                    continue;
                }
                Command::Forget { incarnation: entry, epoch } => {
                    let me = self.clone();
                    let mine = incarnation;
                    tokio::spawn(async move {
                        match me.backend.forget(entry, epoch).await {
                            Ok(()) => me.apply_for(mine, |m| m.forgotten(entry, epoch)),
                            Err(error) => {
                                tracing::warn!(epoch, %error, "forget write failed; the lease counts as lost");
                                me.give_up_lease(incarnation);
                            }
                        }
                    });
                    continue;
                }
                Command::Rejoin => {
                    tokio::spawn(self.clone().rejoin());
                    continue;
                }
            };
            if self.work.send(work).is_err() {
                tracing::debug!("pipeline gone; protocol work dropped");
            }
        }
    }

    /// A lease write of `incarnation` failed: the machine counts its lease as lost, and so must
    /// the backend, which stops renewing it. Otherwise a write that failed for a moment (an API
    /// server restart) would leave a suspended machine behind a lease that is still renewed: the
    /// operator would never fence it, and the barrier would wait for its ack for ever. Unrenewed,
    /// the lease runs out, the operator fences it, and the reader rejoins.
    fn give_up_lease(self: &Arc<Self>, incarnation: Incarnation) {
        if self.lock().incarnation() == incarnation {
            self.backend.observed().set_lost(true);
        }
        self.apply_for(incarnation, ReaderEpochs::lease_lost);
    }

    async fn rejoin(self: Arc<Self>) {
        let attempt = || self.backend.rejoin();
        let warn = |error: &CoordinationError| {
            tracing::warn!(%error, "cannot rejoin yet");
            true
        };
        let Some((incarnation, inherited)) =
            retry(REJOIN_RETRY, REJOIN_RETRY_LONGEST, None, &self.stop, attempt, warn).await
        else {
            return;
        };
        tracing::info!(%incarnation, carried = inherited.len(), "rejoined with a new incarnation");
        let (machine, commands) = ReaderEpochs::rejoined(self.backend.pod(), incarnation, &inherited);
        *self.lock() = machine;
        self.run(commands, incarnation);
        let current = self.backend.observed().checkpoints().borrow().clone();
        if let Some(cp) = current {
            self.apply(|m| m.observe(&cp));
        }
    }

    async fn follow(self: Arc<Self>) {
        let mut checkpoints = self.backend.observed().checkpoints();
        let mut lost = self.backend.observed().lease_lost();
        let current = checkpoints.borrow_and_update().clone();
        if let Some(cp) = current {
            self.apply(|m| m.observe(&cp));
        }
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return,
                changed = checkpoints.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let current = checkpoints.borrow_and_update().clone();
                    if let Some(cp) = current {
                        self.apply(|m| m.observe(&cp));
                    }
                }
                changed = lost.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *lost.borrow_and_update() {
                        self.apply(ReaderEpochs::lease_lost);
                    }
                }
            }
        }
    }
}
