//! A poller: one long-poll loop on one queue, from ReceiveMessage to a spawned delivery.
//!
//! Why receiving and delivering are split: a poller that waited for its sinks would leave the
//! queue idle for the sink's whole round trip; instead it hands the batch to a delivery task and
//! polls again, while the capacity semaphore bounds how much work is in the air. On a stop it
//! lets a receive already on the wire land (briefly) and releases what it brought, so those
//! messages are visible again at once rather than after their visibility timeout.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use backon::BackoffBuilder;
use futures::FutureExt;
use sluice_crds::checkpoint::LEASE_ID_BUDGET;

use crate::aws::{describe, error_type};
use crate::decode::{Decoded, decode};
use crate::dispatch::Item;
use crate::ledger::Tag;
use crate::pipeline::{Arrival, Pipeline};
use crate::queues::Queue;
use crate::redelivery;
use crate::settings::ReceiveSettings;

/// How often a poller looks again whether the checkpoint protocol lets it receive.
const EPOCH_WAIT: Duration = Duration::from_millis(100);

/// How long a receive already sent may still take to land once the reader is stopping.
const RECEIVE_GRACE: Duration = Duration::from_secs(3);

pub struct Poller {
    pub id: usize,
    pub queue: Arc<Queue>,
    pub receive: ReceiveSettings,
    pub pipeline: Arc<Pipeline>,
}

impl Poller {
    pub async fn run(self) {
        let stop = self.pipeline.stop.clone();
        let mut backoff = error_backoff();
        let max = self.receive.max_messages as u32;
        // FIFO: the same attempt id is sent again after a failed receive, so SQS returns the same
        // messages instead of hiding them for a visibility timeout.
        let mut attempt_id: Option<String> = None;
        loop {
            if !self.wait_until_epochs_admit(&stop).await {
                break;
            }
            let permit = tokio::select! {
                biased;
                () = stop.stopped() => break,
                p = self.pipeline.capacity.clone().acquire_many_owned(max) => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            if self.queue.fifo && attempt_id.is_none() {
                attempt_id = Some(random_attempt_id());
            }
            let mut receive = std::pin::pin!(self.receive_once(attempt_id.clone()));
            let (answer, stopping) = tokio::select! {
                biased;
                answer = &mut receive => (answer, false),
                () = stop.stopped() => match tokio::time::timeout(RECEIVE_GRACE, &mut receive).await {
                    Ok(answer) => (answer, true),
                    Err(_) => break,
                },
            };
            let messages = match answer {
                Ok(out) => {
                    backoff = error_backoff();
                    attempt_id = None;
                    out.messages.unwrap_or_default()
                }
                Err(kind) => {
                    if stopping {
                        break;
                    }
                    let delay = backoff.next().unwrap_or(Duration::from_secs(20));
                    tracing::warn!(poller = self.id, queue = %self.queue.url, error = %kind, ?delay, "receive failed; backing off");
                    tokio::select! {
                        () = stop.stopped() => break,
                        () = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            if messages.is_empty() {
                self.pipeline.metrics.empty_receives.inc();
                if stopping {
                    break;
                }
                continue;
            }
            let mut permit = permit;
            if let Some(spare) = permit.split((max as usize).saturating_sub(messages.len())) {
                drop(spare);
            }
            let (tickets, items) = self.take_in(messages).await;
            if stopping {
                self.pipeline.release(&tickets, &items);
                break;
            }
            if items.is_empty() {
                continue;
            }
            let bytes: usize = items.iter().map(|i| i.record.size_bytes()).sum();
            tokio::select! {
                biased;
                () = stop.stopped() => {
                    self.pipeline.release(&tickets, &items);
                    break;
                }
                () = self.pipeline.limiter.acquire(items.len(), bytes) => {}
            }
            let pipeline = self.pipeline.clone();
            let fifo = self.queue.fifo;
            self.pipeline.deliveries.spawn(async move {
                let _permit = permit;
                // A panicking sink must not strand its messages in the ledger (the heartbeat would
                // keep them invisible until the reader exits): they are released instead.
                let dispatch = AssertUnwindSafe(pipeline.dispatcher.dispatch(&items, fifo)).catch_unwind();
                tokio::select! {
                    () = pipeline.abort.cancelled() => {}
                    verdicts = dispatch => match verdicts {
                        Ok(verdicts) => {
                            pipeline.settle(&tickets, &verdicts, &items);
                        }
                        Err(_) => {
                            tracing::error!(messages = tickets.len(), "a sink panicked; releasing its messages");
                            pipeline.metrics.error("deliver", "panic");
                            pipeline.release(&tickets, &items);
                        }
                    },
                }
            });
        }
        tracing::debug!(poller = self.id, queue = %self.queue.url, "poller stopped");
    }

    async fn receive_once(&self, attempt_id: Option<String>) -> Result<ReceiveMessageOutput, String> {
        let r = &self.receive;
        let q = &self.queue;
        let call = q
            .client
            .receive_message()
            .queue_url(q.url.as_ref())
            .max_number_of_messages(r.max_messages)
            .wait_time_seconds(r.wait_time_seconds)
            .visibility_timeout(i32::try_from(q.visibility.as_secs()).unwrap_or(i32::MAX))
            .set_message_system_attribute_names(Some(system_attribute_names(&r.attribute_names)))
            .set_message_attribute_names(Some(r.message_attribute_names.clone()))
            .set_receive_request_attempt_id(attempt_id)
            .send();
        // The SDK has no overall deadline; a long poll never legitimately takes much past its wait.
        let limit = Duration::from_secs(r.wait_time_seconds as u64 + 15);
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => {
                let kind = error_type(&e);
                self.pipeline.metrics.error("receive", kind.clone());
                Err(format!("{kind}: {}", describe(&e)))
            }
            Err(_) => {
                self.pipeline.metrics.error("receive", "timeout");
                Err(format!("no answer within {limit:?}"))
            }
        }
    }

    /// Under exactlyOnce, wait while the protocol says not to receive (joining, fenced, lease
    /// lost, or as many ids pending as a lease may record). `false`: stopped meanwhile.
    async fn wait_until_epochs_admit(&self, stop: &crate::stop::Stop) -> bool {
        let Some(driver) = &self.pipeline.epochs else { return true };
        loop {
            if driver.can_receive()
                && driver.pending_ids() + self.receive.max_messages as usize <= LEASE_ID_BUDGET
            {
                return true;
            }
            tokio::select! {
                () = stop.stopped() => return false,
                () = tokio::time::sleep(EPOCH_WAIT) => {}
            }
        }
    }

    /// Admit the messages to the ledger and decode them. Under exactlyOnce each message is first
    /// classified against the leases (see `redelivery`): only fresh ones are tagged and delivered.
    async fn take_in(&self, messages: Vec<Message>) -> (Vec<u64>, Vec<Item>) {
        let metrics = &self.pipeline.metrics;
        let usable: Vec<Message> = messages
            .into_iter()
            .filter(|m| {
                let ok = m.receipt_handle().is_some() && m.message_id().is_some();
                if !ok {
                    metrics.error("receive", "message_without_id_or_receipt");
                }
                ok
            })
            .collect();
        metrics.received.inc_by(usable.len() as u64);
        let usable = match &self.pipeline.epochs {
            None => usable.into_iter().map(|m| (m, Tag::NONE)).collect(),
            Some(driver) => redelivery::sort(&self.pipeline, driver, &self.queue, usable).await,
        };
        let arrivals: Vec<Arrival> = usable
            .iter()
            .map(|(m, tag)| Arrival {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                handle: m.receipt_handle().unwrap_or_default().to_owned(),
                tag: *tag,
            })
            .collect();
        let admitted = self.pipeline.admit(self.queue.index, &arrivals, self.queue.visibility);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut tickets = Vec::with_capacity(usable.len());
        let mut items = Vec::with_capacity(usable.len());
        for ((message, tag), ticket) in usable.into_iter().zip(admitted) {
            let (mut record, poison) =
                match decode(message, &self.queue.url, self.pipeline.payload, tag.epoch) {
                    Decoded::Ok(r) => (r, None),
                    Decoded::Poison(r, reason) => {
                        metrics.error("decode", "invalid_payload");
                        (r, Some(reason))
                    }
                };
            record.incarnation = tag.incarnation;
            if let Some(sent) = record.sent_timestamp_ms {
                metrics.lag(sent, now_ms);
            }
            tickets.push(ticket);
            items.push(Item { record: Arc::new(record), poison });
        }
        (tickets, items)
    }
}

/// The spec's names, plus what the reader itself needs (unless `All` already covers it).
fn system_attribute_names(spec: &[String]) -> Vec<MessageSystemAttributeName> {
    let mut names: Vec<MessageSystemAttributeName> =
        spec.iter().map(|n| MessageSystemAttributeName::from(n.as_str())).collect();
    if !names.contains(&MessageSystemAttributeName::All) {
        for needed in [
            MessageSystemAttributeName::SentTimestamp,
            MessageSystemAttributeName::ApproximateReceiveCount,
            MessageSystemAttributeName::MessageGroupId,
        ] {
            if !names.contains(&needed) {
                names.push(needed);
            }
        }
    }
    names
}

fn error_backoff() -> impl Iterator<Item = Duration> {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(20))
        .with_jitter()
        .without_max_times()
        .build()
}

/// 1-128 characters of `[a-zA-Z0-9]` and punctuation; 32 alphanumerics suffice.
fn random_attempt_id() -> String {
    std::iter::repeat_with(fastrand::alphanumeric).take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_always_asks_for_the_attributes_it_needs() {
        let names = system_attribute_names(&["SenderId".to_string()]);
        assert_eq!(names.len(), 4);
        assert!(names.contains(&MessageSystemAttributeName::SentTimestamp));
        assert_eq!(system_attribute_names(&["All".to_string()]), vec![MessageSystemAttributeName::All]);
    }

    #[test]
    fn attempt_ids_are_fresh_and_well_formed() {
        let (a, b) = (random_attempt_id(), random_attempt_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn backoff_grows_and_never_ends() {
        let delays: Vec<Duration> = error_backoff().take(40).collect();
        assert_eq!(delays.len(), 40);
        assert!(delays[0] >= Duration::from_millis(200));
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(40)));
    }
}
