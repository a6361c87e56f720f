//! The `s3` sink: a transaction per epoch key, a multipart upload that stays invisible until
//! `commit` completes it (records of epoch 0, under atLeastOnce, are written at once instead).
//!
//! Why it is built this way (the upload per key, the incarnation in the object name, commits of
//! another reader's key, stale and orphan uploads, late records): `protocol/PROTOCOL.md`,
//! "The s3 sink's transactions". Object names: `s3_layout.rs`.
//!
//! A streamed object (`Record::object`) is read from S3 as it is written, one part in memory at a
//! time: under exactlyOnce into its epoch's upload like any record, under atLeastOnce as an
//! object of its own, a multipart upload that is aborted if the read fails.
//!
//! Under atLeastOnce other records are buffered into objects by the `buffer` hints
//! (`s3_buffer.rs`); under exactlyOnce the same hints close an epoch's object and open the next
//! one of the same key (all completed on commit). Objects are written part by part through the
//! encoder of `compression` (`s3_encode.rs`, `s3_object.rs`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures::future::BoxFuture;
use sluice_crds::{S3BufferSpec, S3Compression, S3KeyTime, S3SinkSpec};
use sluice_protocol::{EpochKey, Incarnation, now_ms};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::aws_error;
use super::error::SinkBuildError;
use super::retry::{Attempts, RetryPolicy};
use super::s3_buffer::{Buffers, Hints};
use super::s3_layout::{Layout, StreamedLine, append_line, new_incarnation};
use super::s3_object::ObjectUpload;
use super::url::parse_http_url;
use super::{EpochSupport, Outcome, Sink, SinkError};
use crate::aws::requests::Requests;
use crate::payload::stream::open;
use crate::payload::{FetchError, StreamSource};
use crate::process::sink_stats::SinkStats;
use crate::record::{ObjectRef, Record};

/// S3's smallest part (all but the last part of an upload).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// Buffered bytes of a transaction that trigger a part upload.
pub const DEFAULT_PART_BYTES: usize = 8 * 1024 * 1024;
/// Room beyond a part for the last piece of a streamed object that fills it (base64 of what one
/// read answers; reads answer far less).
const STREAM_PIECE_ROOM: usize = 1024 * 1024;

pub struct S3Sink {
    pub(super) name: String,
    pub(super) client: Client,
    pub(super) bucket: String,
    /// Prefix, partitions and compression: every object's key and encoding.
    pub(super) layout: Layout,
    /// The pod this process's records are tagged by: the `pod` of every key it buffers.
    pub(super) reader: String,
    /// Names the at-least-once objects of this sink instance (epoch 0 has no reader incarnation).
    pub(super) direct_incarnation: String,
    pub(super) part_bytes: usize,
    txns: Mutex<Txns>,
    /// Sequence of the at-least-once objects of this sink instance.
    pub(super) direct_seq: AtomicU64,
    policy: RetryPolicy,
    stats: Arc<SinkStats>,
    /// `sseKmsKeyId`: every object (direct and per-epoch upload) is written with SSE-KMS under
    /// this key; absent, the bucket's default encryption applies.
    pub(super) kms_key: Option<String>,
    /// `buffer`: when records become an object.
    pub(super) hints: Hints,
    /// The at-least-once objects being filled, per partition.
    pub(super) buffers: Mutex<Buffers>,
    /// The reader stops: buffered records are written at once.
    pub(super) stopping: CancellationToken,
    /// What streamed objects are read through (`SinkContext::objects`).
    pub(super) objects: Option<Arc<StreamSource>>,
}

/// A transaction of this process: `(incarnation, epoch)` of its records; the pod is `reader`.
type TxnId = (u64, u64);

/// Finished transactions remembered (so a late record or a repeated call gets a clear answer).
const REMEMBERED_TXNS: usize = 64;

/// The transactions of this process.
#[derive(Default)]
struct Txns {
    by_id: BTreeMap<TxnId, EpochUpload>,
    /// Per incarnation, the newest epoch of a finished transaction that was forgotten: a record
    /// at or below it belongs to a finished transaction, not to a new one.
    forgotten: BTreeMap<u64, u64>,
    /// Counts finishes, so the oldest finished transactions are forgotten first.
    finishes: u64,
}

/// One transaction in this process.
#[derive(Default)]
struct EpochUpload {
    /// Its objects, in the order they were opened; the last of a partition takes its records
    /// unless a hint closed it.
    objects: Vec<ObjectUpload>,
    /// `pre_commit` ran: the transaction takes no more records.
    sealed: bool,
    /// `commit` or `abort` ran.
    finished: Option<Finished>,
    /// When it finished, in `Txns::finishes`.
    finished_at: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finished {
    Committed,
    Aborted,
}

impl EpochUpload {
    /// The object of `partition` that takes records, if one is open.
    fn open_object(&mut self, partition: &str) -> Option<usize> {
        self.objects.iter().rposition(|o| o.partition == partition && !o.closed)
    }
}

impl Txns {
    /// Why a record of `id` is not taken, if it is not.
    fn refusal(&self, id: TxnId) -> Option<String> {
        match self.by_id.get(&id) {
            Some(EpochUpload { finished: Some(how), .. }) => {
                Some(format!("{} is already {}", describe(id), format!("{how:?}").to_lowercase()))
            }
            Some(EpochUpload { sealed: true, .. }) => {
                Some(format!("{} is already pre-committed", describe(id)))
            }
            Some(_) => None,
            None if self.forgotten.get(&id.0).is_some_and(|e| *e >= id.1) => {
                Some(format!("{} is already finished", describe(id)))
            }
            None => None,
        }
    }

    /// Record that `id` finished (dropping its buffer and upload), and forget the oldest finished.
    fn finish(&mut self, id: TxnId, how: Finished) {
        self.finishes += 1;
        let done = EpochUpload { finished: Some(how), finished_at: self.finishes, ..EpochUpload::default() };
        self.by_id.insert(id, done);
        self.prune();
    }

    /// Forget all but the newest finished transactions; open ones are always kept.
    fn prune(&mut self) {
        let mut finished: Vec<(u64, TxnId)> = self
            .by_id
            .iter()
            .filter(|(_, u)| u.finished.is_some())
            .map(|(id, u)| (u.finished_at, *id))
            .collect();
        finished.sort_unstable();
        let excess = finished.len().saturating_sub(REMEMBERED_TXNS);
        for (_, (incarnation, epoch)) in &finished[..excess] {
            self.by_id.remove(&(*incarnation, *epoch));
            let through = self.forgotten.entry(*incarnation).or_default();
            *through = (*through).max(*epoch);
        }
    }
}

/// Why copying a streamed object failed: reading it, or writing it.
enum Copying {
    Fetch(FetchError),
    Sink(SinkError),
}

impl Copying {
    fn reason(&self) -> &str {
        match self {
            Copying::Fetch(e) => e.reason(),
            Copying::Sink(e) => &e.message,
        }
    }

    /// An object gone, unreadable or replaced is poison; anything else is tried again later.
    fn outcome(&self) -> Outcome {
        let reason = self.reason().to_owned();
        match self {
            Copying::Fetch(FetchError::Permanent(_)) => Outcome::Rejected { reason },
            _ => Outcome::Failed { reason },
        }
    }
}

fn describe((incarnation, epoch): TxnId) -> String {
    format!("epoch {epoch} of incarnation {}", Incarnation(incarnation))
}

fn describe_key(key: &EpochKey) -> String {
    format!("epoch {} of {} incarnation {}", key.epoch, key.pod, key.incarnation)
}

impl S3Sink {
    /// `reader` is this reader's identity (the pod name); it scopes the keys this sink writes.
    pub fn new(
        name: &str,
        spec: &S3SinkSpec,
        aws: &aws_config::SdkConfig,
        requests: &Arc<Requests>,
        reader: &str,
        policy: RetryPolicy,
    ) -> Result<Self, SinkBuildError> {
        if spec.bucket.len() < 3 {
            return Err(SinkBuildError::new(
                "s3.bucket",
                format!("not a valid bucket name: {:?}", spec.bucket),
            ));
        }
        let template = sluice_crds::key_template::parse(&spec.key_template)
            .map_err(|why| SinkBuildError::new("s3.keyTemplate", why))?;
        let mut config = aws_sdk_s3::config::Builder::from(aws)
            .retry_config(RetryConfig::disabled())
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired);
        if let Some(endpoint) = &spec.endpoint {
            parse_http_url(endpoint).map_err(|m| SinkBuildError::new("s3.endpoint", m))?;
            config = config.endpoint_url(endpoint);
        }
        if spec.endpoint.is_some() || aws.endpoint_url().is_some() {
            // Endpoint overrides (LocalStack, MinIO) serve buckets by path, not by host name.
            config = config.force_path_style(true);
        }
        if let Some(region) = &spec.region {
            config = config.region(Region::new(region.clone()));
        }
        let client = Client::from_conf(config.interceptor(requests.interceptor()).build());
        let sink = Self::with_client(name, client, &spec.bucket, &spec.prefix, reader, policy);
        let layout = Layout::new(&spec.prefix, template, spec.key_time, spec.compression);
        Ok(Self {
            kms_key: spec.sse_kms_key_id.clone(),
            layout,
            hints: Hints::from_spec(&spec.buffer),
            ..sink
        })
    }

    pub fn with_client(
        name: &str,
        client: Client,
        bucket: &str,
        prefix: &str,
        reader: &str,
        policy: RetryPolicy,
    ) -> Self {
        let now_ms = u64::try_from(now_ms()).unwrap_or(0);
        Self {
            name: name.to_owned(),
            client,
            bucket: bucket.to_owned(),
            layout: Layout::new(prefix, Vec::new(), S3KeyTime::SentTimestamp, S3Compression::None),
            reader: reader.to_owned(),
            direct_incarnation: new_incarnation(now_ms),
            part_bytes: DEFAULT_PART_BYTES,
            txns: Mutex::default(),
            direct_seq: AtomicU64::new(0),
            policy,
            stats: Arc::default(),
            kms_key: None,
            hints: Hints::from_spec(&S3BufferSpec::default()),
            buffers: Mutex::default(),
            stopping: CancellationToken::new(),
            objects: None,
        }
    }

    /// Upload a part whenever this many bytes are buffered (at least S3's 5 MiB minimum).
    pub fn with_part_bytes(mut self, bytes: usize) -> Self {
        self.part_bytes = bytes.max(MIN_PART_BYTES);
        self
    }

    /// Buffered at-least-once records are written at once when `stopping` is cancelled.
    pub fn stopping(mut self, stopping: CancellationToken) -> Self {
        self.stopping = stopping;
        self
    }

    /// Read streamed objects through `objects` (the payload stage's reader).
    pub fn objects(mut self, objects: Option<Arc<StreamSource>>) -> Self {
        self.objects = objects;
        self
    }

    /// The at-least-once buffer waits at most `max_wait` (tests shorten it).
    #[cfg(test)]
    pub fn with_max_wait(mut self, max_wait: std::time::Duration) -> Self {
        self.hints.max_wait = max_wait;
        self
    }

    /// The object `key` becomes when committed (its first, with no time partition).
    pub fn object_key(&self, key: &EpochKey) -> String {
        self.layout.epoch_object("", &key.pod, key.epoch, &key.incarnation.to_string(), 0)
    }

    /// Object `n` of transaction `id` of this process, in `partition`.
    fn own_object_key(&self, (incarnation, epoch): TxnId, partition: &str, n: u64) -> String {
        self.layout.epoch_object(partition, &self.reader, epoch, &Incarnation(incarnation).to_string(), n)
    }

    async fn deliver_records(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.iter().all(|r| r.epoch != 0) {
            return self.buffer(records).await;
        }
        let (direct, epochal): (Vec<_>, Vec<_>) = (0..records.len()).partition(|i| records[*i].epoch == 0);
        let (streamed, direct): (Vec<_>, Vec<_>) =
            direct.into_iter().partition(|i| records[*i].object.is_some());
        let pick = |indexes: &[usize]| indexes.iter().map(|i| records[*i].clone()).collect::<Vec<_>>();
        let mut outcomes = vec![Outcome::Delivered; records.len()];
        for (i, outcome) in direct.iter().zip(self.write_buffered(&pick(&direct)).await) {
            outcomes[*i] = outcome;
        }
        for i in streamed {
            outcomes[i] = self.write_direct_streamed(&records[i]).await;
        }
        for (i, outcome) in epochal.iter().zip(self.buffer(&pick(&epochal)).await) {
            outcomes[*i] = outcome;
        }
        outcomes
    }

    /// At-least-once, a streamed object: a multipart upload of its own line, one part in memory
    /// at a time, aborted if the object cannot be read to its end.
    async fn write_direct_streamed(&self, record: &Record) -> Outcome {
        let Some(object) = &record.object else {
            return Outcome::Failed { reason: "not a streamed record".into() };
        };
        let seq = self.direct_seq.fetch_add(1, Ordering::Relaxed);
        let partition = self.layout.partition(record);
        let key = self.layout.direct(&partition, &self.reader, &self.direct_incarnation, seq);
        let mut upload = ObjectUpload::new(key, partition, self.layout.compression);
        let written = match self.stream_line(&mut upload, record, object).await {
            Ok(()) => self.write_object(&mut upload).await.map_err(Copying::Sink),
            Err((copying, _line)) => Err(copying),
        };
        if written.is_err() {
            self.abandon(&upload).await;
        }
        match written {
            Ok(()) => Outcome::Delivered,
            Err(copying) => copying.outcome(),
        }
    }

    /// Open `object` and write its line into `upload`'s buffer, uploading a part whenever the
    /// buffer holds `part_bytes`. Nothing is written if the object cannot be opened; a failure
    /// midway answers the line, still open, for the caller to close or drop.
    async fn stream_line(
        &self,
        upload: &mut ObjectUpload,
        record: &Record,
        object: &ObjectRef,
    ) -> Result<(), (Copying, Option<StreamedLine>)> {
        let mut reading =
            open(self.objects.as_deref(), object).await.map_err(|e| (Copying::Fetch(e), None))?;
        // Room for a part and the piece that completes it, up front: a buffer grown by doubling
        // past `part_bytes` would hold twice the part.
        let room = self.part_bytes + STREAM_PIECE_ROOM;
        upload.buffer.reserve(room.saturating_sub(upload.buffer.len()));
        let mut line = StreamedLine::start(&mut upload.buffer, record);
        while let Some(piece) = reading.next_chunk().await {
            match piece {
                Ok(piece) => line.push(&mut upload.buffer, &piece),
                Err(e) => return Err((Copying::Fetch(e), Some(line))),
            }
            if upload.buffer.len() >= self.part_bytes {
                if let Err(e) = self.upload_ready(upload, false).await {
                    return Err((Copying::Sink(e), Some(line)));
                }
                upload.buffer.reserve(room);
            }
        }
        line.finish(&mut upload.buffer);
        upload.records += 1;
        Ok(())
    }

    /// Exactly-once: add `records` to their epochs' objects, closing an object when a buffer
    /// hint is reached (its last part uploaded; it is completed with the others on commit).
    async fn buffer(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.is_empty() {
            return Vec::new();
        }
        let mut txns = self.txns.lock().await;
        let mut outcomes = Vec::with_capacity(records.len());
        let mut touched = Vec::new();
        for record in records {
            let id = (record.incarnation, record.epoch);
            // Released to be classified again on redelivery: `Rejected` would dead-letter a
            // message that is not poison, `Failed` would hold it for a key that stays sealed.
            if let Some(reason) = txns.refusal(id) {
                outcomes.push(Outcome::Redeliver { reason });
                continue;
            }
            let txn = txns.by_id.entry(id).or_default();
            let partition = self.layout.partition(record);
            let at = match txn.open_object(&partition) {
                Some(at) => at,
                None => {
                    let key = self.own_object_key(id, &partition, txn.objects.len() as u64);
                    txn.objects.push(ObjectUpload::new(key, partition, self.layout.compression));
                    txn.objects.len() - 1
                }
            };
            touched.push((id, at));
            let upload = &mut txn.objects[at];
            let Some(object) = &record.object else {
                append_line(&mut upload.buffer, record);
                upload.records += 1;
                upload.closed = self.hints.reached(upload.records, upload.raw_bytes());
                outcomes.push(Outcome::Delivered);
                continue;
            };
            outcomes.push(match self.stream_line(upload, record, object).await {
                Ok(()) => {
                    upload.closed = self.hints.reached(upload.records, upload.raw_bytes());
                    Outcome::Delivered
                }
                Err((copying, line)) => {
                    // Parts already uploaded cannot be taken back: the line is closed as
                    // truncated (it holds no record) and the message is delivered again later.
                    if let Some(line) = line {
                        line.truncate(&mut upload.buffer, copying.reason());
                    }
                    copying.outcome()
                }
            });
        }
        touched.sort_unstable();
        touched.dedup();
        for (id, at) in touched {
            if let Some(upload) = txns.by_id.get_mut(&id).and_then(|t| t.objects.get_mut(at)) {
                self.advance(id, upload).await;
            }
        }
        outcomes
    }

    /// After records were added to an epoch's object: close it if a hint is reached, else upload
    /// a part if one is full. A failure keeps the bytes; pre_commit tries again and decides.
    async fn advance(&self, id: TxnId, upload: &mut ObjectUpload) {
        let result = if upload.closed {
            self.upload_ready(upload, true).await
        } else if upload.buffer.len() >= self.part_bytes {
            self.upload_ready(upload, false).await
        } else {
            Ok(())
        };
        if let Err(e) = result {
            tracing::warn!(sink = %self.name, txn = %describe(id), error = %e, "part upload failed; will retry at pre-commit");
        }
    }

    async fn pre_commit_key(&self, key: &EpochKey) -> Result<(), SinkError> {
        if key.pod != self.reader {
            return Err(self.error(format!(
                "cannot pre-commit {}: this process stages only records tagged by {}",
                describe_key(key),
                self.reader
            )));
        }
        let id = (key.incarnation.0, key.epoch);
        let mut txns = self.txns.lock().await;
        if !txns.by_id.contains_key(&id) && txns.refusal(id).is_some() {
            // Finished so long ago that whether it committed is forgotten: do not guess.
            return Err(self.error(format!("{} is already finished", describe(id))));
        }
        // With nothing buffered the entry is created sealed: the key had no records for this
        // sink, and a record arriving after the ack must not start its transaction afresh.
        let upload = txns.by_id.entry(id).or_default();
        match upload.finished {
            Some(Finished::Committed) => return Ok(()),
            Some(Finished::Aborted) => return Err(self.error(format!("{} was aborted", describe(id)))),
            None => {}
        }
        upload.sealed = true;
        for object in &mut upload.objects {
            object.closed = true;
            self.upload_ready(object, true).await?;
        }
        Ok(())
    }

    async fn commit_key(&self, key: &EpochKey) -> Result<(), SinkError> {
        let id = (key.incarnation.0, key.epoch);
        let own_pod = key.pod == self.reader;
        let mut txns = self.txns.lock().await;
        if let Some(upload) = txns.by_id.get_mut(&id).filter(|_| own_pod) {
            match upload.finished {
                Some(Finished::Committed) => return Ok(()),
                Some(Finished::Aborted) => return Err(self.error(format!("{} was aborted", describe(id)))),
                None => {}
            }
            for object in &mut upload.objects {
                object.closed = true;
                self.upload_ready(object, true).await?;
                if let Some(upload_id) = object.upload_id.clone() {
                    self.complete(&object.key, &upload_id, object.parts.clone()).await?;
                }
            }
            if !upload.objects.is_empty() {
                match self.pending_uploads(&key.pod, key.epoch).await {
                    Ok(pending) => self.abort_other_incarnations(key, &pending).await,
                    Err(e) => tracing::warn!(sink = %self.name, error = %e, "listing stale uploads failed"),
                }
            }
        } else {
            if !own_pod {
                // Another pod's key: this process has no state of it to keep consistent.
                drop(txns);
                return self.commit_listed(key).await;
            }
            self.commit_listed(key).await?;
        }
        txns.finish(id, Finished::Committed);
        Ok(())
    }

    /// Whether `upload` (pending under `key`'s pod and epoch number) is one of `key`'s objects.
    fn of_key(&self, upload: &str, key: &EpochKey) -> bool {
        self.layout.incarnation_of(upload, &key.pod, key.epoch) == Some(key.incarnation.to_string().as_str())
    }

    /// Commit `key` from what S3 holds: complete its pending uploads (parts from `ListParts`).
    async fn commit_listed(&self, key: &EpochKey) -> Result<(), SinkError> {
        let pending = self.pending_uploads(&key.pod, key.epoch).await?;
        let mut staged = BTreeMap::<&str, Vec<_>>::new();
        for (object, upload_id) in pending.iter().filter(|(k, _)| self.of_key(k, key)) {
            let parts = self.listed_parts(object, upload_id).await?;
            if parts.is_empty() {
                // An orphan: completing it would fail, or replace the real output with nothing.
                self.abort_upload(object, upload_id).await?;
            } else {
                staged.entry(object).or_default().push((upload_id, parts));
            }
        }
        for (object, uploads) in staged {
            if uploads.len() > 1 {
                // One process stages an object once; two staged uploads mean two sinks share a
                // bucket and prefix. The newest (completed last) wins, as if it had overwritten.
                tracing::warn!(sink = %self.name, key = %object, uploads = uploads.len(), "several staged uploads for one key");
            }
            for (upload_id, parts) in uploads {
                self.complete(object, upload_id, parts).await?;
            }
        }
        if key.pod == self.reader {
            self.abort_other_incarnations(key, &pending).await;
        }
        Ok(())
    }

    /// On the commit of `key` (of this sink's pod): abort the pod's uploads of the same epoch
    /// number by other incarnations. Each was aborted by the protocol (module docs, "Stale
    /// uploads"); nothing else would reclaim those of an incarnation that died. Best effort: the
    /// commit succeeded already, and a failure here only leaves garbage, not wrong output.
    async fn abort_other_incarnations(&self, key: &EpochKey, pending: &[(String, String)]) {
        let committed = self.object_key(key);
        for (stale_key, stale_id) in pending.iter().filter(|(k, _)| !self.of_key(k, key)) {
            tracing::info!(sink = %self.name, committed = %committed, stale = %stale_key, "aborting another incarnation's upload of a committed epoch number");
            if let Err(e) = self.abort_upload(stale_key, stale_id).await {
                tracing::warn!(sink = %self.name, stale = %stale_key, error = %e, "aborting a stale upload failed");
            }
        }
    }

    /// Whether some reader committed `key`: one of its objects exists. Checked on the first
    /// object's fixed name and on every object this process opened; with placeholders in the
    /// template another pod's objects cannot be named without listing the bucket, so only its
    /// pending uploads decide (an abort of them cannot touch a completed object).
    async fn committed_somewhere(&self, key: &EpochKey, local: &[String]) -> Result<bool, SinkError> {
        let mut names: Vec<String> = local.to_vec();
        if self.layout.fixed() {
            let partition = self.layout.fixed_partition();
            names.push(self.layout.epoch_object(
                &partition,
                &key.pod,
                key.epoch,
                &key.incarnation.to_string(),
                0,
            ));
        }
        for name in names {
            if self.exists(&name).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn abort_key(&self, key: &EpochKey) -> Result<(), SinkError> {
        let id = (key.incarnation.0, key.epoch);
        let own_pod = key.pod == self.reader;
        // Held throughout for the own pod, so no record joins the transaction while it is aborted.
        let mut txns = self.txns.lock().await;
        let local = if own_pod { txns.by_id.get(&id) } else { None };
        let objects: Vec<(String, Option<String>)> = local
            .map(|u| u.objects.iter().map(|o| (o.key.clone(), o.upload_id.clone())).collect())
            .unwrap_or_default();
        let committed = || self.error(format!("{} is committed; it cannot be aborted", describe_key(key)));
        match local.and_then(|u| u.finished) {
            Some(Finished::Committed) => return Err(committed()),
            Some(Finished::Aborted) => {}
            // Not known here as finished: an object exists only if someone committed the key.
            None if self
                .committed_somewhere(key, &objects.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>())
                .await? =>
            {
                if own_pod {
                    txns.finish(id, Finished::Committed);
                }
                return Err(committed());
            }
            None => {}
        }
        if own_pod {
            txns.finish(id, Finished::Aborted);
            for (object, upload_id) in objects.iter().filter_map(|(k, u)| Some((k, u.as_ref()?))) {
                self.abort_upload(object, upload_id).await?;
            }
        } else {
            drop(txns);
        }
        let pending = self.pending_uploads(&key.pod, key.epoch).await?;
        for (object, upload_id) in pending.iter().filter(|(k, _)| self.of_key(k, key)) {
            self.abort_upload(object, upload_id).await?;
        }
        Ok(())
    }

    pub(super) async fn complete(
        &self,
        key: &str,
        upload_id: &str,
        mut parts: Vec<CompletedPart>,
    ) -> Result<(), SinkError> {
        parts.sort_by_key(|p| p.part_number());
        let done = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
        let result = self
            .retrying("CompleteMultipartUpload", || {
                self.client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(done.clone())
                    .send()
            })
            .await;
        match result {
            Ok(_) => Ok(()),
            // Completed by an earlier call whose answer was lost: the object is there.
            Err(e) if e.message.contains("NoSuchUpload") && self.exists(key).await? => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, SinkError> {
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) => Err(self.error(format!("HeadObject {key}: {}", aws_error::classify(&e).reason()))),
        }
    }

    pub(super) async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), SinkError> {
        let result = self
            .retrying("AbortMultipartUpload", || {
                self.client.abort_multipart_upload().bucket(&self.bucket).key(key).upload_id(upload_id).send()
            })
            .await;
        match result {
            Err(e) if !e.message.contains("NoSuchUpload") => Err(e),
            _ => Ok(()),
        }
    }

    /// `(key, upload id)` of the uploads pending under a pod's epoch number (all incarnations),
    /// oldest first.
    async fn pending_uploads(&self, pod: &str, epoch: u64) -> Result<Vec<(String, String)>, SinkError> {
        let prefix = self.layout.listing(pod, epoch);
        let mut found = Vec::new();
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        // Bounded: an epoch number of one pod has a handful of incarnations at most.
        for _page in 0..100 {
            let page = self
                .retrying("ListMultipartUploads", || {
                    self.client
                        .list_multipart_uploads()
                        .bucket(&self.bucket)
                        .prefix(&prefix)
                        .set_key_marker(key_marker.clone())
                        .set_upload_id_marker(id_marker.clone())
                        .send()
                })
                .await?;
            for upload in page.uploads() {
                if let (Some(key), Some(id)) = (upload.key(), upload.upload_id())
                    && self.layout.incarnation_of(key, pod, epoch).is_some()
                {
                    let initiated = upload.initiated().and_then(|t| t.to_millis().ok()).unwrap_or(0);
                    found.push((initiated, key.to_owned(), id.to_owned()));
                }
            }
            if page.is_truncated() != Some(true) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            id_marker = page.next_upload_id_marker().map(str::to_owned);
        }
        found.sort();
        Ok(found.into_iter().map(|(_, key, id)| (key, id)).collect())
    }

    async fn listed_parts(&self, key: &str, upload_id: &str) -> Result<Vec<CompletedPart>, SinkError> {
        let mut parts = Vec::new();
        let mut marker = None::<String>;
        // Bounded: 10,000 parts is S3's limit, 1,000 per page.
        for _page in 0..11 {
            let page = self
                .retrying("ListParts", || {
                    self.client
                        .list_parts()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .set_part_number_marker(marker.clone())
                        .send()
                })
                .await?;
            parts.extend(page.parts().iter().map(|p| {
                CompletedPart::builder()
                    .set_part_number(p.part_number())
                    .set_e_tag(p.e_tag().map(str::to_owned))
                    .build()
            }));
            if page.is_truncated() != Some(true) {
                break;
            }
            marker = page.next_part_number_marker().map(str::to_owned);
        }
        Ok(parts)
    }

    /// Run one S3 call under the retry policy; the error says which call and why.
    pub(super) async fn retrying<T, E, F, Fut>(&self, what: &str, call: F) -> Result<T, SinkError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let mut attempts = Attempts::new(&self.policy, &self.stats);
        loop {
            let call_started = Instant::now();
            let result = call().await;
            self.stats.record_request(call_started.elapsed());
            let failure = match result {
                Ok(value) => return Ok(value),
                Err(e) => aws_error::classify(&e),
            };
            match attempts.failed(failure.class(&self.policy)) {
                Ok(delay) => tokio::time::sleep(delay).await,
                Err(_) => {
                    let made = attempts.made();
                    return Err(self.error(format!("{what}: {} (after {made} attempts)", failure.reason())));
                }
            }
        }
    }

    pub(super) fn error(&self, message: impl Into<String>) -> SinkError {
        SinkError { sink: self.name.clone(), message: message.into() }
    }
}

impl Sink for S3Sink {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver<'a>(&'a self, records: &'a [Arc<Record>]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(self.deliver_records(records))
    }

    fn epoch_support(&self) -> EpochSupport {
        EpochSupport::Transactional
    }

    fn streams_objects(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<Arc<SinkStats>> {
        Some(self.stats.clone())
    }

    fn pre_commit(&self, key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        let key = key.clone();
        Box::pin(async move { self.pre_commit_key(&key).await })
    }

    fn commit(&self, key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        let key = key.clone();
        Box::pin(async move { self.commit_key(&key).await })
    }

    fn abort(&self, key: &EpochKey) -> BoxFuture<'_, Result<(), SinkError>> {
        let key = key.clone();
        Box::pin(async move { self.abort_key(&key).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_open_transactions_and_the_newest_finished() {
        let mut txns = Txns::default();
        let (inc, other) = (7, 9);
        txns.by_id.insert((inc, 3), EpochUpload::default());
        for epoch in (1..=100).filter(|e| *e != 3) {
            txns.finish((inc, epoch), Finished::Committed);
        }
        // Finished last, though its id sorts first: forgetting goes by finishing order.
        txns.finish((other, 1), Finished::Aborted);
        assert!(txns.by_id.contains_key(&(inc, 3)), "an open transaction is never forgotten");
        assert_eq!(txns.by_id.len(), REMEMBERED_TXNS + 1);
        assert!(txns.by_id.contains_key(&(other, 1)) && txns.by_id.contains_key(&(inc, 100)));
        assert!(!txns.by_id.contains_key(&(inc, 37)) && txns.by_id.contains_key(&(inc, 38)));
        assert_eq!(txns.forgotten.get(&inc), Some(&37));
        assert!(txns.refusal((inc, 20)).unwrap().contains("already finished"), "forgotten, still refused");
        assert!(txns.refusal((inc, 3)).is_none(), "open");
        assert!(txns.refusal((inc, 101)).is_none(), "new");
        assert!(txns.refusal((other, 2)).is_none(), "another incarnation's new epoch");
        assert!(txns.refusal((other, 1)).unwrap().contains("aborted"));
    }
}
