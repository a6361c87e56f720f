//! The stages' gate under exactlyOnce: each question answered by the driver.

use std::sync::Arc;

use aws_sdk_sqs::types::Message;
use futures::future::BoxFuture;
use sluice_protocol::{Incarnation, LEASE_ID_BUDGET};

use super::Driver;
use super::redelivery;
use crate::aws::queue::Queue;
use crate::settle::ledger::Tag;
use crate::settle::{Gate, Pipeline};

pub struct EpochGate {
    driver: Arc<Driver>,
}

impl EpochGate {
    pub fn new(driver: Arc<Driver>) -> Self {
        Self { driver }
    }
}

impl Gate for EpochGate {
    /// Not while joining, fenced, with the lease lost or draining, nor once a batch more could
    /// take the ids pending past what a lease may record.
    fn may_receive(&self, batch: usize) -> bool {
        self.driver.can_receive() && self.driver.pending_ids() + batch <= LEASE_ID_BUDGET
    }

    fn sort<'a>(
        &'a self,
        pipeline: &'a Arc<Pipeline>,
        queue: &'a Queue,
        messages: Vec<Message>,
    ) -> BoxFuture<'a, Vec<(Message, Tag)>> {
        Box::pin(redelivery::sort(pipeline, &self.driver, queue, messages))
    }

    fn settled(&self, tag: Tag, message_id: &str, delivered: bool) {
        self.driver.settled(Incarnation(tag.incarnation), tag.epoch, message_id, delivered);
    }

    fn held(&self, covered_until_ms: i64, drain_millis_per_second: u64, in_flight: u64) {
        let backend = self.driver.backend();
        backend.visibility_covered_until(covered_until_ms);
        backend.report(drain_millis_per_second, in_flight, self.driver.is_draining());
    }
}
