//! When an acknowledged message may be deleted.
//!
//! Why a policy and not a flag in the pipeline: at-least-once deletes as soon as the sink says
//! `Delivered`; exactly-once (DESIGN.md section 3) holds the acknowledged receipts of an epoch
//! until the epoch is committed across readers. The ledger asks the policy, so the pipeline is
//! the same under both guarantees and the coordination layer only has to call `commit`.

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

    /// May an acknowledged message of `epoch` be deleted, given the last committed epoch?
    pub fn allows(self, epoch: u64, committed: Option<u64>) -> bool {
        match self {
            DeletePolicy::OnAck => true,
            DeletePolicy::OnCommit => committed.is_some_and(|c| epoch <= c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_ack_always_allows_and_on_commit_waits_for_the_epoch() {
        assert!(DeletePolicy::OnAck.allows(3, None));
        assert!(!DeletePolicy::OnCommit.allows(0, None));
        assert!(!DeletePolicy::OnCommit.allows(4, Some(3)));
        assert!(DeletePolicy::OnCommit.allows(3, Some(3)));
        assert!(DeletePolicy::OnCommit.allows(2, Some(3)));
        assert_eq!(DeletePolicy::for_guarantee(Guarantee::ExactlyOnce), DeletePolicy::OnCommit);
    }
}
