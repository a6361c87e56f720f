//! The stages' gate under exactlyOnce: each question answered by the driver.

use std::sync::Arc;

use aws_sdk_sqs::types::Message;
use futures::future::BoxFuture;
use sluice_protocol::{EpochKey, Incarnation, LEASE_ID_BUDGET};

use super::Driver;
use super::redelivery;
use crate::aws::queue::Queue;
use crate::process::metrics::Metrics;
use crate::settle::{Decision, Gate, Tag};

pub struct EpochGate {
    driver: Arc<Driver>,
    metrics: Arc<Metrics>,
}

impl EpochGate {
    pub fn new(driver: Arc<Driver>, metrics: Arc<Metrics>) -> Self {
        Self { driver, metrics }
    }
}

impl Gate for EpochGate {
    /// Not while joining, fenced, with the lease lost or draining, nor once a batch more could
    /// take the ids pending past what a lease may record.
    fn may_receive(&self, batch: usize) -> bool {
        self.driver.can_receive() && self.driver.pending_ids() + batch <= LEASE_ID_BUDGET
    }

    fn sort<'a>(&'a self, queue: &'a Queue, messages: &'a [Message]) -> BoxFuture<'a, Vec<Decision>> {
        Box::pin(redelivery::sort(&self.driver, &self.metrics, queue, messages))
    }

    fn settled(&self, tag: Tag, message_id: &str, delivered: bool) {
        self.driver.settled(Incarnation(tag.incarnation), tag.epoch, message_id, delivered);
    }

    /// Only a delete sent on a valid lease had a current handle (see
    /// `Backend::lease_valid_until_ms`); then the lease entry may shrink.
    fn redelivery_deleted(&self, key: &EpochKey, message_id: &str, sent_at_ms: i64) -> bool {
        if sent_at_ms >= self.driver.backend().lease_valid_until_ms() {
            return false;
        }
        self.driver.redelivered_deleted(key, message_id);
        true
    }

    fn held(&self, covered_until_ms: i64, drain_millis_per_second: u64, in_flight: u64) {
        let backend = self.driver.backend();
        backend.visibility_covered_until(covered_until_ms);
        backend.report(drain_millis_per_second, in_flight, self.driver.is_draining());
    }
}
