//! How long a changed SqsSource waited for the reconcile that first sees the change
//! (`sluice_operator_reconcile_wait_seconds`): the reconciler's queue delay as a user feels it.
//!
//! Why from the object and not from kube-runtime: the controller's queue does not say when an
//! entry was enqueued. The API server does say when the source's spec or metadata was last written
//! (`metadata.managedFields[].time`, the status subresource left out), and a source whose
//! `status.observedGeneration` is behind its `metadata.generation` has not been reconciled since.
//! The wait counts from that write to the reconcile's start, so it includes the watch's delivery
//! and the queue; the time has whole seconds, so the figure is good to about a second.

use std::sync::LazyLock;

use k8s_openapi::jiff::Timestamp;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use sluice_crds::SqsSource;

/// Registered as `sluice_operator_reconcile_wait_seconds` (`crate::metrics`). 0.25 s to about 17
/// minutes.
pub static WAIT: LazyLock<Histogram> = LazyLock::new(|| Histogram::new(exponential_buckets(0.25, 2.0, 13)));

/// Seconds from the source's last spec or metadata write to `now`, when this generation has not
/// been reconciled yet; `None` otherwise (a reconcile started by a child or a retry of a
/// generation already seen).
pub fn waited(source: &SqsSource, now: Timestamp) -> Option<f64> {
    let generation = source.metadata.generation?;
    let observed = source.status.as_ref().and_then(|s| s.observed_generation);
    if observed.is_some_and(|o| o >= generation) {
        return None;
    }
    let written = source
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref().unwrap_or_default().is_empty())
        .filter_map(|f| f.time.as_ref().map(|t| t.0))
        .max()?;
    Some(now.duration_since(written).as_secs_f64().max(0.0))
}

/// Observes the wait of `source`, if it is reconciled for a new generation.
pub fn observe(source: &SqsSource) {
    if let Some(seconds) = waited(source, Timestamp::now()) {
        WAIT.observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    use super::*;
    use crate::fixtures;

    fn entry(at: i64, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            time: Some(Time(Timestamp::from_second(at).unwrap())),
            subresource: subresource.map(str::to_owned),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn counts_from_the_last_spec_write_of_a_generation_not_yet_reconciled() {
        let mut source = fixtures::source(fixtures::BASIC);
        source.metadata.generation = Some(2);
        source.metadata.managed_fields =
            Some(vec![entry(1_000, None), entry(1_010, None), entry(1_030, Some("status"))]);
        let now = Timestamp::from_second(1_013).unwrap();
        assert_eq!(waited(&source, now), Some(3.0));
        source.status.get_or_insert_default().observed_generation = Some(1);
        assert_eq!(waited(&source, now), Some(3.0));
        source.status.get_or_insert_default().observed_generation = Some(2);
        assert_eq!(waited(&source, now), None, "already reconciled");
    }
}
