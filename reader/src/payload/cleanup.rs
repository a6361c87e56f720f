//! Deleting an Extended Client pointer's S3 object once its message is gone from the queue
//! (`spec.payload.extendedClient.deleteObjects`), as the Extended Clients do when they delete a
//! message.
//!
//! Why keyed by the id `settle` gives each received message (opaque here) and fired by the acker
//! (through `process::settled::Settled`, which this implements): the object may go only when SQS
//! confirmed the message's deletion, and that answer exists only in the acker (a failed
//! DeleteMessageBatch entry means the message comes back and still needs its object). Under
//! exactlyOnce the acker deletes a message only after the epoch holding it committed, so the
//! same hook keeps the object for as long as the epoch is open.
//!
//! Which objects: only those whose payload the reader fetched and handed to the sinks. A pointer
//! that could not be resolved (bucket not allowed, object unreadable) goes to the dead-letter
//! sink as the pointer it is, so its object must stay for whoever reads the dead letter. A
//! payload that was fetched and then dead-lettered by a sink carries the payload itself (or a new
//! offload of it), so its original object is deleted like any other.
//!
//! Why on a task of its own, through a bounded queue: deleting objects must never slow receiving
//! or acknowledging. When the queue is full the object is left (and counted), never waited for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::events::ObjectsLeft;
use super::pointer::Pointer;
use crate::process::events::Event;
use crate::process::metrics::Metrics;
use crate::process::settled::Settled;

/// The id `settle` gives one received message (a redelivery gets a new one); opaque here.
pub type Ticket = u64;

/// Objects waiting for their DeleteObjects call; beyond this they are left in place.
const QUEUED: usize = 10_000;
/// S3's limit on keys per DeleteObjects call.
pub const KEYS_PER_CALL: usize = 1000;
/// How long a stopping reader waits for deletes already queued.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The objects of messages in work, and the queue to the deleting task.
pub struct ObjectCleanup {
    /// Objects of delivered messages whose SQS delete is not yet confirmed, by ticket.
    waiting: Mutex<HashMap<Ticket, Pointer>>,
    queue: Mutex<Option<mpsc::Sender<Pointer>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
}

impl ObjectCleanup {
    /// Start the deleting task on `client` (the resolver's S3 client).
    pub fn start(client: aws_sdk_s3::Client, metrics: Arc<Metrics>) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUED);
        let task = tokio::spawn(super::cleanup_task::run(client, rx, metrics.clone()));
        Arc::new(Self {
            waiting: Mutex::default(),
            queue: Mutex::new(Some(tx)),
            task: Mutex::new(Some(task)),
            metrics,
        })
    }

    /// `ticket`'s payload was fetched from `object` and goes to the sinks: delete the object if
    /// the message's deletion is confirmed.
    pub fn remember(&self, ticket: Ticket, object: Pointer) {
        self.lock_waiting().insert(ticket, object);
    }

    /// SQS confirmed these messages deleted: their objects go.
    fn deleted_now(&self, tickets: &[Ticket]) {
        let due = take(&mut self.lock_waiting(), tickets);
        if due.is_empty() {
            return;
        }
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut dropped = 0;
        for object in due {
            match &queue {
                Some(tx) => {
                    if let Err(e) = tx.try_send(object) {
                        let object = e.into_inner();
                        let reason = format!(
                            "s3://{}/{} left in place: {QUEUED} objects already wait for deletion (S3 slower than the queue drains)",
                            object.bucket, object.key
                        );
                        ObjectsLeft { kind: "dropped", objects: 1, reason: &reason }.emit(&self.metrics);
                    }
                }
                None => dropped += 1,
            }
        }
        if dropped > 0 {
            self.metrics.payload.object_deletes("dropped", dropped);
        }
    }

    /// Let the deletes already queued finish (briefly); nothing is queued after this.
    async fn close_now(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).take();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task
            && tokio::time::timeout(CLOSE_WAIT, task).await.is_err()
        {
            tracing::warn!("stopping with S3 object deletes still running; those objects stay");
        }
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashMap<Ticket, Pointer>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Settled for ObjectCleanup {
    fn deleted(&self, tickets: &[Ticket]) {
        self.deleted_now(tickets);
    }

    /// Released or given up: the messages come back with their objects, which stay.
    fn returned(&self, tickets: &[Ticket]) {
        take(&mut self.lock_waiting(), tickets);
    }

    fn close(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(self.close_now())
    }
}

/// The objects of `tickets`, removed from `waiting`.
fn take(waiting: &mut HashMap<Ticket, Pointer>, tickets: &[Ticket]) -> Vec<Pointer> {
    tickets.iter().filter_map(|t| waiting.remove(t)).collect()
}

/// `objects` as DeleteObjects calls: per bucket, at most [`KEYS_PER_CALL`] distinct keys each.
pub fn calls(objects: Vec<Pointer>) -> Vec<(String, Vec<String>)> {
    let mut by_bucket: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for Pointer { bucket, key } in objects {
        by_bucket.entry(bucket).or_default().insert(key);
    }
    by_bucket
        .into_iter()
        .flat_map(|(bucket, keys)| {
            let keys: Vec<String> = keys.into_iter().collect();
            keys.chunks(KEYS_PER_CALL).map(|c| (bucket.clone(), c.to_vec())).collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(bucket: &str, key: &str) -> Pointer {
        Pointer { bucket: bucket.into(), key: key.into() }
    }

    #[test]
    fn only_confirmed_tickets_yield_their_objects_and_each_once() {
        let mut waiting = HashMap::new();
        waiting.insert(1, object("b", "one"));
        waiting.insert(2, object("b", "two"));
        waiting.insert(3, object("b", "three"));
        // Ticket 2's delete failed: it is forgotten (released or given up), not deleted.
        assert!(take(&mut waiting, &[2]).len() == 1);
        assert_eq!(take(&mut waiting, &[1, 2, 4]), vec![object("b", "one")]);
        assert_eq!(take(&mut waiting, &[1]), vec![], "a second confirmation deletes nothing more");
        assert_eq!(waiting.len(), 1);
    }

    #[test]
    fn calls_group_by_bucket_dedupe_keys_and_respect_the_per_call_limit() {
        let mut objects: Vec<Pointer> =
            (0..KEYS_PER_CALL + 5).map(|i| object("big", &format!("k{i}"))).collect();
        objects.push(object("small", "x"));
        objects.push(object("small", "x"));
        objects.push(object("big", "k0"));
        let calls = calls(objects);
        let shape: Vec<(&str, usize)> = calls.iter().map(|(b, k)| (b.as_str(), k.len())).collect();
        assert_eq!(shape, vec![("big", KEYS_PER_CALL), ("big", 5), ("small", 1)]);
    }
}

#[cfg(test)]
#[path = "cleanup_tests.rs"]
mod localstack_tests;
