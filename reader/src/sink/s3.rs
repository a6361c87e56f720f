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

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, ServerSideEncryption};
use futures::future::BoxFuture;
use sluice_crds::S3SinkSpec;
use sluice_protocol::{EpochKey, Incarnation, now_ms};
use tokio::sync::Mutex;

use super::aws_error;
use super::error::SinkBuildError;
use super::retry::{Attempts, RetryPolicy};
use super::s3_layout::{StreamedLine, append_line, direct_key, epoch_prefix, new_incarnation, object_key};
use super::stats::SinkStats;
use super::url::parse_http_url;
use super::{EpochSupport, Outcome, Sink, SinkError};
use crate::payload::{FetchError, StreamedObject};
use crate::record::Record;

/// S3's smallest part (all but the last part of an upload).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// Buffered bytes of a transaction that trigger a part upload.
pub const DEFAULT_PART_BYTES: usize = 8 * 1024 * 1024;
/// Room beyond a part for the last piece of a streamed object that fills it (base64 of what one
/// read answers; reads answer far less).
const STREAM_PIECE_ROOM: usize = 1024 * 1024;

pub struct S3Sink {
    name: String,
    client: Client,
    bucket: String,
    prefix: String,
    /// The pod this process's records are tagged by: the `pod` of every key it buffers.
    reader: String,
    /// Names the at-least-once objects of this sink instance (epoch 0 has no reader incarnation).
    direct_incarnation: String,
    part_bytes: usize,
    txns: Mutex<Txns>,
    /// Sequence of the at-least-once objects of this sink instance.
    direct_seq: AtomicU64,
    policy: RetryPolicy,
    stats: Arc<SinkStats>,
    /// `sseKmsKeyId`: every object (direct and per-epoch upload) is written with SSE-KMS under
    /// this key; absent, the bucket's default encryption applies.
    kms_key: Option<String>,
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
    upload_id: Option<String>,
    buffer: Vec<u8>,
    parts: Vec<CompletedPart>,
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
        reader: &str,
        policy: RetryPolicy,
    ) -> Result<Self, SinkBuildError> {
        if spec.bucket.len() < 3 {
            return Err(SinkBuildError::new(
                "s3.bucket",
                format!("not a valid bucket name: {:?}", spec.bucket),
            ));
        }
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
        let client = Client::from_conf(config.interceptor(crate::aws::requests::CountRequests).build());
        let sink = Self::with_client(name, client, &spec.bucket, &spec.prefix, reader, policy);
        Ok(Self { kms_key: spec.sse_kms_key_id.clone(), ..sink })
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
            prefix: prefix.to_owned(),
            reader: reader.to_owned(),
            direct_incarnation: new_incarnation(now_ms),
            part_bytes: DEFAULT_PART_BYTES,
            txns: Mutex::default(),
            direct_seq: AtomicU64::new(0),
            policy,
            stats: Arc::default(),
            kms_key: None,
        }
    }

    /// Upload a part whenever this many bytes are buffered (at least S3's 5 MiB minimum).
    pub fn with_part_bytes(mut self, bytes: usize) -> Self {
        self.part_bytes = bytes.max(MIN_PART_BYTES);
        self
    }

    /// The object `key` becomes when committed.
    pub fn object_key(&self, key: &EpochKey) -> String {
        object_key(&self.prefix, &key.pod, key.epoch, &key.incarnation.to_string())
    }

    /// The key of a transaction of this process.
    fn own_key(&self, (incarnation, epoch): TxnId) -> EpochKey {
        EpochKey { pod: self.reader.clone(), incarnation: Incarnation(incarnation), epoch }
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
        if !direct.is_empty()
            && let Err(e) = self.write_direct(&pick(&direct)).await
        {
            for i in &direct {
                outcomes[*i] = Outcome::Failed { reason: e.message.clone() };
            }
        }
        for i in streamed {
            outcomes[i] = self.write_direct_streamed(&records[i]).await;
        }
        for (i, outcome) in epochal.iter().zip(self.buffer(&pick(&epochal)).await) {
            outcomes[*i] = outcome;
        }
        outcomes
    }

    /// At-least-once: the records as one object, durable and visible when this returns `Ok`.
    async fn write_direct(&self, records: &[Arc<Record>]) -> Result<(), SinkError> {
        let mut body = Vec::new();
        for record in records {
            append_line(&mut body, record);
        }
        let seq = self.direct_seq.fetch_add(1, Ordering::Relaxed);
        let key = direct_key(&self.prefix, &self.reader, &self.direct_incarnation, seq);
        let body = bytes::Bytes::from(body);
        self.retrying("PutObject", || {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&key)
                .content_type("application/x-ndjson")
                .set_server_side_encryption(self.kms_key.as_ref().map(|_| ServerSideEncryption::AwsKms))
                .set_ssekms_key_id(self.kms_key.clone())
                .body(ByteStream::from(body.clone()))
                .send()
        })
        .await?;
        Ok(())
    }

    /// At-least-once, a streamed object: a multipart upload of its own line, one part in memory
    /// at a time, aborted if the object cannot be read to its end.
    async fn write_direct_streamed(&self, record: &Record) -> Outcome {
        let Some(object) = &record.object else {
            return Outcome::Failed { reason: "not a streamed record".into() };
        };
        let seq = self.direct_seq.fetch_add(1, Ordering::Relaxed);
        let key = direct_key(&self.prefix, &self.reader, &self.direct_incarnation, seq);
        let mut upload = EpochUpload::default();
        let written = match self.stream_line(&key, &mut upload, record, object).await {
            Ok(()) => self.flush_to(&key, &mut upload).await.map_err(Copying::Sink),
            Err((copying, _line)) => Err(copying),
        };
        let written = match (written, upload.upload_id.clone()) {
            (Ok(()), Some(upload_id)) => {
                self.complete(&key, &upload_id, upload.parts.clone()).await.map_err(Copying::Sink)
            }
            (written, _) => written,
        };
        if written.is_err()
            && let Some(upload_id) = &upload.upload_id
            && let Err(e) = self.abort_upload(&key, upload_id).await
        {
            tracing::warn!(sink = %self.name, key, error = %e, "aborting the upload of a streamed object failed");
        }
        match written {
            Ok(()) => Outcome::Delivered,
            Err(copying) => copying.outcome(),
        }
    }

    /// Open `object` and write its line into `upload`'s buffer, uploading a part to `key`
    /// whenever the buffer holds `part_bytes`. Nothing is written if the object cannot be
    /// opened; a failure midway answers the line, still open, for the caller to close or drop.
    async fn stream_line(
        &self,
        key: &str,
        upload: &mut EpochUpload,
        record: &Record,
        object: &StreamedObject,
    ) -> Result<(), (Copying, Option<StreamedLine>)> {
        let mut reading = object.open().await.map_err(|e| (Copying::Fetch(e), None))?;
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
                if let Err(e) = self.flush_to(key, upload).await {
                    return Err((Copying::Sink(e), Some(line)));
                }
                upload.buffer.reserve(room);
            }
        }
        line.finish(&mut upload.buffer);
        Ok(())
    }

    async fn buffer(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.is_empty() {
            return Vec::new();
        }
        let mut txns = self.txns.lock().await;
        let mut outcomes = Vec::with_capacity(records.len());
        for record in records {
            let id = (record.incarnation, record.epoch);
            // Released to be classified again on redelivery: `Rejected` would dead-letter a
            // message that is not poison, `Failed` would hold it for a key that stays sealed.
            if let Some(reason) = txns.refusal(id) {
                outcomes.push(Outcome::Redeliver { reason });
                continue;
            }
            let upload = txns.by_id.entry(id).or_default();
            let Some(object) = &record.object else {
                append_line(&mut upload.buffer, record);
                outcomes.push(Outcome::Delivered);
                continue;
            };
            let key = self.object_key(&self.own_key(id));
            outcomes.push(match self.stream_line(&key, upload, record, object).await {
                Ok(()) => Outcome::Delivered,
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
        let full: Vec<TxnId> =
            txns.by_id.iter().filter(|(_, u)| u.buffer.len() >= self.part_bytes).map(|(id, _)| *id).collect();
        for id in full {
            if let Some(upload) = txns.by_id.get_mut(&id) {
                // A failed flush keeps the buffer; pre_commit tries again and decides the epoch.
                if let Err(e) = self.flush(id, upload).await {
                    tracing::warn!(sink = %self.name, txn = %describe(id), error = %e, "part upload failed; will retry at pre-commit");
                }
            }
        }
        outcomes
    }

    /// Upload the buffer of `id` as its next part (starting the upload if needed).
    async fn flush(&self, id: TxnId, upload: &mut EpochUpload) -> Result<(), SinkError> {
        self.flush_to(&self.object_key(&self.own_key(id)), upload).await
    }

    /// Upload `upload`'s buffer as its next part of `key` (starting the upload if needed).
    async fn flush_to(&self, key: &str, upload: &mut EpochUpload) -> Result<(), SinkError> {
        let upload_id = match &upload.upload_id {
            Some(upload_id) => upload_id.clone(),
            None => {
                let created = self
                    .retrying("CreateMultipartUpload", || {
                        self.client
                            .create_multipart_upload()
                            .bucket(&self.bucket)
                            .key(key)
                            .content_type("application/x-ndjson")
                            .set_server_side_encryption(
                                self.kms_key.as_ref().map(|_| ServerSideEncryption::AwsKms),
                            )
                            .set_ssekms_key_id(self.kms_key.clone())
                            .send()
                    })
                    .await?;
                let upload_id =
                    created.upload_id().ok_or_else(|| self.error("CreateMultipartUpload: no upload id"))?;
                upload.upload_id.insert(upload_id.to_owned()).clone()
            }
        };
        let part_number = i32::try_from(upload.parts.len() + 1).map_err(|_| self.error("too many parts"))?;
        let body = bytes::Bytes::from(std::mem::take(&mut upload.buffer));
        let sent = self
            .retrying("UploadPart", || {
                self.client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .part_number(part_number)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await;
        match sent {
            Ok(part) => {
                let e_tag = part.e_tag().unwrap_or_default();
                upload.parts.push(CompletedPart::builder().part_number(part_number).e_tag(e_tag).build());
                Ok(())
            }
            Err(e) => {
                upload.buffer = body.to_vec();
                Err(e)
            }
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
        if !upload.buffer.is_empty() {
            self.flush(id, upload).await?;
        }
        upload.sealed = true;
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
            if !upload.buffer.is_empty() {
                self.flush(id, upload).await?;
            }
            if let Some(upload_id) = upload.upload_id.clone() {
                self.complete(&self.object_key(key), &upload_id, upload.parts.clone()).await?;
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

    /// Commit `key` from what S3 holds: complete its pending upload (parts from `ListParts`).
    async fn commit_listed(&self, key: &EpochKey) -> Result<(), SinkError> {
        let object = self.object_key(key);
        let pending = self.pending_uploads(&key.pod, key.epoch).await?;
        let mut staged = Vec::new();
        for (_, upload_id) in pending.iter().filter(|(k, _)| *k == object) {
            let parts = self.listed_parts(&object, upload_id).await?;
            if parts.is_empty() {
                // An orphan: completing it would fail, or replace the real output with nothing.
                self.abort_upload(&object, upload_id).await?;
            } else {
                staged.push((upload_id, parts));
            }
        }
        if staged.len() > 1 {
            // One process stages a key once; two staged uploads mean two sinks share a bucket and
            // prefix. The newest (completed last) wins, as if one of them had overwritten the other.
            tracing::warn!(sink = %self.name, key = %object, uploads = staged.len(), "several staged uploads for one key");
        }
        for (upload_id, parts) in staged {
            self.complete(&object, upload_id, parts).await?;
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
        let object = self.object_key(key);
        for (stale_key, stale_id) in pending.iter().filter(|(k, _)| *k != object) {
            tracing::info!(sink = %self.name, committed = %object, stale = %stale_key, "aborting another incarnation's upload of a committed epoch number");
            if let Err(e) = self.abort_upload(stale_key, stale_id).await {
                tracing::warn!(sink = %self.name, stale = %stale_key, error = %e, "aborting a stale upload failed");
            }
        }
    }

    async fn abort_key(&self, key: &EpochKey) -> Result<(), SinkError> {
        let id = (key.incarnation.0, key.epoch);
        let own_pod = key.pod == self.reader;
        let object = self.object_key(key);
        // Held throughout for the own pod, so no record joins the transaction while it is aborted.
        let mut txns = self.txns.lock().await;
        let local = if own_pod { txns.by_id.get(&id) } else { None };
        let committed = || self.error(format!("{} is committed; it cannot be aborted", describe_key(key)));
        match local.and_then(|u| u.finished) {
            Some(Finished::Committed) => return Err(committed()),
            Some(Finished::Aborted) => {}
            // Not known here as finished: the object exists only if someone committed the key.
            None if self.exists(&object).await? => {
                if own_pod {
                    txns.finish(id, Finished::Committed);
                }
                return Err(committed());
            }
            None => {}
        }
        if own_pod {
            let local_id = txns.by_id.get(&id).and_then(|u| u.upload_id.clone());
            txns.finish(id, Finished::Aborted);
            if let Some(upload_id) = local_id {
                self.abort_upload(&object, &upload_id).await?;
            }
        } else {
            drop(txns);
        }
        let pending = self.pending_uploads(&key.pod, key.epoch).await?;
        for (_, upload_id) in pending.iter().filter(|(k, _)| *k == object) {
            self.abort_upload(&object, upload_id).await?;
        }
        Ok(())
    }

    async fn complete(
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

    async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), SinkError> {
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
        let prefix = epoch_prefix(&self.prefix, pod, epoch);
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
                if let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) {
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
    async fn retrying<T, E, R, F, Fut>(&self, what: &str, call: F) -> Result<T, SinkError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
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

    fn error(&self, message: impl Into<String>) -> SinkError {
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
