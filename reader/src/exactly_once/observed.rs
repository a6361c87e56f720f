//! What a backend has observed, for the driver to follow: the latest checkpoint, and whether the
//! own lease is lost. Both backends publish through it, so the driver sees the same signals
//! whether they come from ConfigMaps or from the in-process coordinator.

use sluice_protocol::Checkpoint;
use tokio::sync::watch;

pub struct Observed {
    checkpoint: watch::Sender<Option<Checkpoint>>,
    lost: watch::Sender<bool>,
}

impl Default for Observed {
    fn default() -> Self {
        Self { checkpoint: watch::Sender::new(None), lost: watch::Sender::new(false) }
    }
}

impl Observed {
    /// Publish `checkpoint` if it differs from the last one published.
    pub fn checkpoint(&self, checkpoint: Checkpoint) {
        self.checkpoint.send_if_modified(|seen| {
            let changed = seen.as_ref() != Some(&checkpoint);
            if changed {
                *seen = Some(checkpoint);
            }
            changed
        });
    }

    /// The own lease is lost (`true`), or held again after a rejoin (`false`).
    pub fn set_lost(&self, lost: bool) {
        self.lost.send_replace(lost);
    }

    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Checkpoint versions as they are observed (`None` until the first).
    pub fn checkpoints(&self) -> watch::Receiver<Option<Checkpoint>> {
        self.checkpoint.subscribe()
    }

    /// Becomes `true` when the own lease is lost: a renewal conflict, or it ran out on our clock.
    pub fn lease_lost(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }
}
