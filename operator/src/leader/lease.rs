//! Who holds the operator's Lease, decided from the Lease alone.
//!
//! Why pure: leader election is where two replicas disagree about time and state; keeping the
//! decision a function of (lease, me, now) makes every case a one-line test. The I/O around it
//! (`elector.rs`) only reads the Lease and writes what this module says, with the read's
//! resourceVersion, so a concurrent writer makes the write fail instead of both winning.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// What to do with the Lease now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nobody holds it (or the holder let it expire): take it over.
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a live lease: stand by.
    Wait,
}

/// Decides from the current spec (None: the Lease does not exist yet).
pub fn decide(current: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = current else {
        return Step::Acquire;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == me => Step::Renew,
        None | Some("") => Step::Acquire,
        Some(_) if expired(spec, now) => Step::Acquire,
        Some(_) => Step::Wait,
    }
}

/// Whether the holder's lease ran out (a lease without a renew time or duration has).
pub fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(MicroTime(renewed)), Some(seconds)) => {
            // A renew time too far in the future to add to counts as live (it cannot overflow
            // in practice; failing safe keeps a confused clock from stealing the lease).
            renewed
                .checked_add(SignedDuration::from_secs(i64::from(seconds.max(0))))
                .is_ok_and(|until| until < now)
        }
        _ => true,
    }
}

/// The spec to write for `step` (Acquire or Renew).
pub fn claim(
    current: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
    duration_seconds: i32,
    step: Step,
) -> LeaseSpec {
    let previous = current.cloned().unwrap_or_default();
    let taking_over = step == Step::Acquire;
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time: if taking_over { Some(MicroTime(now)) } else { previous.acquire_time },
        renew_time: Some(MicroTime(now)),
        lease_transitions: match (taking_over, current) {
            (true, Some(_)) => Some(previous.lease_transitions.unwrap_or(0).saturating_add(1)),
            (true, None) => Some(0),
            (false, _) => previous.lease_transitions,
        },
        ..previous
    }
}

/// The spec to write when stepping down: no holder, so a standby takes over at once.
pub fn release(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec { holder_identity: None, renew_time: Some(MicroTime(now)), ..current.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn held(by: &str, renewed: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(by.into()),
            renew_time: Some(MicroTime(at(renewed))),
            lease_duration_seconds: Some(duration),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decisions() {
        let cases = [
            (None, 100, Step::Acquire),
            (Some(held("me", 90, 15)), 100, Step::Renew),
            (Some(held("me", 0, 15)), 100, Step::Renew),
            (Some(held("other", 90, 15)), 100, Step::Wait),
            (Some(held("other", 90, 15)), 105, Step::Wait),
            (Some(held("other", 90, 15)), 106, Step::Acquire),
            (
                Some(LeaseSpec { holder_identity: Some(String::new()), ..held("x", 99, 15) }),
                100,
                Step::Acquire,
            ),
            (Some(LeaseSpec { renew_time: None, ..held("other", 0, 15) }), 100, Step::Acquire),
            (Some(held("other", 90, -5)), 100, Step::Acquire),
        ];
        for (lease, now, want) in cases {
            assert_eq!(decide(lease.as_ref(), "me", at(now)), want, "{lease:?} at {now}");
        }
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let theirs = held("other", 0, 15);
        let taken = claim(Some(&theirs), "me", at(100), 15, Step::Acquire);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(100))));
        let renewed = claim(Some(&taken), "me", at(110), 15, Step::Renew);
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(110))));
        let fresh = claim(None, "me", at(5), 15, Step::Acquire);
        assert_eq!(fresh.lease_transitions, Some(0));
    }

    #[test]
    fn a_released_lease_is_free_for_the_next() {
        let mine = held("me", 90, 15);
        let released = release(&mine, at(95));
        assert_eq!(decide(Some(&released), "other", at(96)), Step::Acquire);
    }
}
