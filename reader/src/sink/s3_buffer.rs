//! At-least-once buffering for the `s3` sink: records become one object per partition when a
//! `buffer` hint is reached (bytes, records) or the first record has waited `maxSeconds`, or at
//! once when the reader stops.
//!
//! Why `deliver` waits for the object: a record's message may be deleted only once the object
//! holding it is written, and the pipeline deletes on `Delivered`. So each `deliver` call adds its
//! records to the open object of their partition and waits for that object's flush; the flush is
//! done by whichever call reaches a hint, or by the first waiter whose deadline passes. Until then
//! the records are in flight like any other: in the ledger (the heartbeat keeps their messages
//! invisible) and in the held bound's room (so a big buffer cannot make the reader hold more
//! than its bound; `intake::bound` keeps the bound at least one object's records). A failed
//! flush is the sink's fault: every record of the object answers `Failed`, is held and delivered
//! again in a later object, never costing its message a receive.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_crds::S3BufferSpec;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Outcome;
use super::s3::S3Sink;
use super::s3_layout::append_line;
use super::s3_object::ObjectUpload;
use crate::record::Record;

/// When buffered records become an object: the first hint reached.
#[derive(Clone, Copy, Debug)]
pub struct Hints {
    pub max_bytes: usize,
    pub max_records: usize,
    pub max_wait: Duration,
}

impl Hints {
    pub fn from_spec(spec: &S3BufferSpec) -> Self {
        Self {
            max_bytes: usize::try_from(spec.max_bytes).unwrap_or(usize::MAX).max(1),
            max_records: (spec.max_records as usize).max(1),
            max_wait: Duration::from_secs(u64::from(spec.max_seconds.max(1))),
        }
    }

    /// An object of `records` records and `bytes` raw bytes is full.
    pub fn reached(&self, records: usize, bytes: usize) -> bool {
        records >= self.max_records || bytes >= self.max_bytes
    }
}

/// How a flush ended, for every record of the object: `Err` holds the reason.
type Flushed = Option<Result<(), String>>;

/// An object being filled under at-least-once.
struct Batch {
    id: u64,
    object: ObjectUpload,
    deadline: Instant,
    done: watch::Sender<Flushed>,
    /// A part upload failed: the object is written no further; its records are failed.
    failed: Option<String>,
}

/// The open objects, one per partition.
#[derive(Default)]
pub struct Buffers {
    open: HashMap<String, Batch>,
    next_id: u64,
}

/// What one record waits for: its object's flush.
struct Waiting {
    partition: String,
    id: u64,
    deadline: Instant,
    done: watch::Receiver<Flushed>,
}

impl S3Sink {
    /// At-least-once: add `records` to their partitions' objects and answer once each object
    /// holding them is written (`Delivered`) or failed (`Failed`).
    pub(super) async fn write_buffered(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.is_empty() {
            return Vec::new();
        }
        let (waits, full) = self.add(records).await;
        for batch in full {
            self.flush(batch).await;
        }
        let mut outcomes = Vec::with_capacity(records.len());
        let mut answers: HashMap<u64, Outcome> = HashMap::new();
        for wait in waits {
            let outcome = match answers.get(&wait.id) {
                Some(outcome) => outcome.clone(),
                None => {
                    let id = wait.id;
                    let outcome = match self.wait(wait).await {
                        Ok(()) => Outcome::Delivered,
                        Err(reason) => Outcome::Failed { reason },
                    };
                    answers.insert(id, outcome.clone());
                    outcome
                }
            };
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Append each record to the open object of its partition; answers what each record waits
    /// for, and the objects that reached a hint (taken out, for the caller to flush).
    async fn add(&self, records: &[Arc<Record>]) -> (Vec<Waiting>, Vec<Batch>) {
        let mut buffers = self.buffers.lock().await;
        let mut waits = Vec::with_capacity(records.len());
        let mut full = Vec::new();
        for record in records {
            let partition = self.layout.partition(record);
            let buffers = &mut *buffers;
            let batch = match buffers.open.get_mut(&partition) {
                Some(batch) => batch,
                None => {
                    buffers.next_id += 1;
                    let batch = self.open_batch(buffers.next_id, &partition);
                    buffers.open.entry(partition.clone()).or_insert(batch)
                }
            };
            append_line(&mut batch.object.buffer, record);
            batch.object.records += 1;
            if batch.object.buffer.len() >= self.part_bytes
                && batch.failed.is_none()
                && let Err(e) = self.upload_ready(&mut batch.object, false).await
            {
                batch.failed = Some(e.message);
            }
            waits.push(Waiting {
                partition: partition.clone(),
                id: batch.id,
                deadline: batch.deadline,
                done: batch.done.subscribe(),
            });
            if batch.failed.is_some() || self.hints.reached(batch.object.records, batch.object.raw_bytes()) {
                full.extend(buffers.open.remove(&partition));
            }
        }
        (waits, full)
    }

    fn open_batch(&self, id: u64, partition: &str) -> Batch {
        let seq = self.direct_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = self.layout.direct(partition, &self.reader, &self.direct_incarnation, seq);
        Batch {
            id,
            object: ObjectUpload::new(key, partition.to_owned(), self.layout.compression),
            deadline: Instant::now() + self.hints.max_wait,
            done: watch::Sender::new(None),
            failed: None,
        }
    }

    /// Write `batch` as its object (or give up on it) and tell every record waiting for it.
    async fn flush(&self, mut batch: Batch) {
        let result = match batch.failed.take() {
            Some(reason) => Err(reason),
            None => self.write_object(&mut batch.object).await.map_err(|e| e.message),
        };
        if result.is_err() {
            self.abandon(&batch.object).await;
        }
        tracing::debug!(sink = %self.name, key = %batch.object.key, records = batch.object.records, ok = result.is_ok(), "buffered object flushed");
        batch.done.send_replace(Some(result));
    }

    /// Wait for the flush of the object `wait` names, flushing it first if its deadline passes
    /// or the reader stops while it is still open.
    async fn wait(&self, mut wait: Waiting) -> Result<(), String> {
        let mut flushing = false;
        loop {
            if let Some(result) = wait.done.borrow_and_update().clone() {
                return result;
            }
            if flushing {
                if wait.done.changed().await.is_err() {
                    return Err("the object holding the record was abandoned unwritten".into());
                }
                continue;
            }
            tokio::select! {
                changed = wait.done.changed() => {
                    if changed.is_err() {
                        return Err("the object holding the record was abandoned unwritten".into());
                    }
                }
                () = tokio::time::sleep_until(wait.deadline) => flushing = true,
                () = self.stopping.cancelled() => flushing = true,
            }
            if flushing {
                let mut buffers = self.buffers.lock().await;
                let ours = buffers.open.get(&wait.partition).is_some_and(|b| b.id == wait.id);
                let batch = if ours { buffers.open.remove(&wait.partition) } else { None };
                drop(buffers);
                if let Some(batch) = batch {
                    self.flush(batch).await;
                }
            }
        }
    }
}
