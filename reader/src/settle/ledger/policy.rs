//! When an acknowledged message may be deleted.
//!
//! Why a policy and not a flag in the pipeline: at-least-once deletes as soon as the sink says
//! `Delivered`; exactly-once (`protocol/PROTOCOL.md`) holds the acknowledged receipts of an epoch
//! until the epoch is committed across readers. The ledger asks the policy, so the pipeline is
//! the same under both guarantees and the exactly-once layer only has to call `commit`.

use sluice_crds::Guarantee;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletePolicy {
    /// Delete on acknowledgement.
    OnAck,
    /// Hold acknowledged receipts until their epoch is committed.
    OnCommit,
}

impl DeletePolicy {
    pub fn for_guarantee(guarantee: Guarantee) -> Self {
        match guarantee {
            Guarantee::AtLeastOnce => DeletePolicy::OnAck,
            Guarantee::ExactlyOnce => DeletePolicy::OnCommit,
        }
    }

    /// Whether an acknowledged message is deleted at once (or held for its epoch's commit, which
    /// the exactly-once layer announces).
    pub fn deletes_on_ack(self) -> bool {
        self == DeletePolicy::OnAck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_ack_deletes_at_once_and_on_commit_holds() {
        assert!(DeletePolicy::OnAck.deletes_on_ack());
        assert!(!DeletePolicy::OnCommit.deletes_on_ack());
        assert_eq!(DeletePolicy::for_guarantee(Guarantee::ExactlyOnce), DeletePolicy::OnCommit);
    }
}
