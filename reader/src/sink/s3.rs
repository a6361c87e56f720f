//! The `s3` sink: a transaction per checkpoint epoch (DESIGN.md section 3, issue 7).
//!
//! Why a multipart upload per epoch: S3 keeps a multipart upload invisible until it is completed,
//! and completing one is a single atomic step. So an epoch's records are appended to a buffer,
//! uploaded as parts as the buffer fills, and `pre_commit(E)` uploads the rest: the output is
//! then durable but invisible, and the reader may ack `E`. `commit(E)` completes the upload (the
//! object appears, all of it at once); `abort(E)` aborts it (nothing appears). Records of an
//! epoch are `Delivered` once buffered: a record counts as safe only after `pre_commit`, which the
//! reader awaits before acking, and a reader that dies before that never acked, so its records
//! return to the queue.
//!
//! Records of epoch 0 (atLeastOnce, where there are no epochs) are not buffered: each `deliver`
//! writes them as one object and answers `Delivered` only once S3 has it, because under
//! atLeastOnce the reader deletes a message as soon as its sink says `Delivered`.
//!
//! `commit` is idempotent and does not need this process's memory: without local state it lists
//! the epoch's pending uploads under `<prefix>/<reader>/epoch-<E>/` and completes the newest (the
//! incarnation that acked; older ones belong to processes that died or were fenced before acking
//! and are aborted). So a restarted reader, or another party through `commit_for`, can finish an
//! acked epoch whose commit was interrupted. An already completed upload is success.

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
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures::future::BoxFuture;
use sluice_crds::S3SinkSpec;
use tokio::sync::Mutex;

use super::aws_error::{self, AwsFailure};
use super::build::SinkBuildError;
use super::http::parse_http_url;
use super::retry::{Class, RetryPolicy};
use super::s3_layout::{append_line, direct_key, epoch_prefix, new_incarnation, object_key};
use super::stats::SinkStats;
use super::{EpochSupport, Outcome, Sink, SinkError};
use crate::record::Record;

/// S3's smallest part (all but the last part of an upload).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// Buffered bytes of an epoch that trigger a part upload.
pub const DEFAULT_PART_BYTES: usize = 8 * 1024 * 1024;

pub struct S3Sink {
    name: String,
    client: Client,
    bucket: String,
    prefix: String,
    reader: String,
    incarnation: String,
    part_bytes: usize,
    epochs: Mutex<BTreeMap<u64, EpochUpload>>,
    /// Sequence of the at-least-once objects of this incarnation.
    direct_seq: AtomicU64,
    policy: RetryPolicy,
    stats: Arc<SinkStats>,
}

/// Finished epochs remembered (so a late record or a repeated call gets a clear answer).
const REMEMBERED_EPOCHS: usize = 64;

/// One epoch's transaction in this process.
#[derive(Default)]
struct EpochUpload {
    upload_id: Option<String>,
    buffer: Vec<u8>,
    parts: Vec<CompletedPart>,
    /// `pre_commit` ran: the epoch takes no more records.
    sealed: bool,
    /// `commit` or `abort` ran.
    finished: Option<Finished>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finished {
    Committed,
    Aborted,
}

impl EpochUpload {
    fn finished(how: Finished) -> Self {
        Self { finished: Some(how), ..Self::default() }
    }
}

/// Forget all but the newest finished epochs; open ones are always kept.
fn prune(epochs: &mut BTreeMap<u64, EpochUpload>) {
    let finished: Vec<u64> = epochs.iter().filter(|(_, u)| u.finished.is_some()).map(|(e, _)| *e).collect();
    for epoch in finished.iter().take(finished.len().saturating_sub(REMEMBERED_EPOCHS)) {
        epochs.remove(epoch);
    }
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
        let client = Client::from_conf(config.build());
        Ok(Self::with_client(name, client, &spec.bucket, &spec.prefix, reader, policy))
    }

    pub fn with_client(
        name: &str,
        client: Client,
        bucket: &str,
        prefix: &str,
        reader: &str,
        policy: RetryPolicy,
    ) -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            name: name.to_owned(),
            client,
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            reader: reader.to_owned(),
            incarnation: new_incarnation(now_ms),
            part_bytes: DEFAULT_PART_BYTES,
            epochs: Mutex::default(),
            direct_seq: AtomicU64::new(0),
            policy,
            stats: Arc::default(),
        }
    }

    /// Upload a part whenever this many bytes are buffered (at least S3's 5 MiB minimum).
    pub fn with_part_bytes(mut self, bytes: usize) -> Self {
        self.part_bytes = bytes.max(MIN_PART_BYTES);
        self
    }

    /// The object this process writes for `epoch` (visible after `commit`).
    pub fn object_key(&self, epoch: u64) -> String {
        object_key(&self.prefix, &self.reader, epoch, &self.incarnation)
    }

    /// Complete `reader`'s pending upload for `epoch`: for finishing the acked epoch of a reader
    /// that can no longer do it. Idempotent.
    pub async fn commit_for(&self, reader: &str, epoch: u64) -> Result<(), SinkError> {
        let uploads = self.pending_uploads(reader, epoch).await?;
        let Some(((key, upload_id), stale)) = uploads.split_last() else { return Ok(()) };
        for (key, upload_id) in stale {
            self.abort_upload(key, upload_id).await?;
        }
        let parts = self.listed_parts(key, upload_id).await?;
        self.complete(key, upload_id, parts).await
    }

    /// Abort every pending upload of `reader` for `epoch`. Idempotent.
    pub async fn abort_for(&self, reader: &str, epoch: u64) -> Result<(), SinkError> {
        for (key, upload_id) in self.pending_uploads(reader, epoch).await? {
            self.abort_upload(&key, &upload_id).await?;
        }
        Ok(())
    }

    async fn deliver_records(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.iter().all(|r| r.epoch != 0) {
            return self.buffer(records).await;
        }
        let (direct, epochal): (Vec<_>, Vec<_>) = (0..records.len()).partition(|i| records[*i].epoch == 0);
        let pick = |indexes: &[usize]| indexes.iter().map(|i| records[*i].clone()).collect::<Vec<_>>();
        let mut outcomes = vec![Outcome::Delivered; records.len()];
        if let Err(e) = self.write_direct(&pick(&direct)).await {
            for i in &direct {
                outcomes[*i] = Outcome::Failed { reason: e.message.clone() };
            }
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
        let key = direct_key(&self.prefix, &self.reader, &self.incarnation, seq);
        let body = bytes::Bytes::from(body);
        self.retrying("PutObject", || {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&key)
                .content_type("application/x-ndjson")
                .body(ByteStream::from(body.clone()))
                .send()
        })
        .await?;
        Ok(())
    }

    async fn buffer(&self, records: &[Arc<Record>]) -> Vec<Outcome> {
        if records.is_empty() {
            return Vec::new();
        }
        let mut epochs = self.epochs.lock().await;
        let outcomes = records
            .iter()
            .map(|record| {
                let upload = epochs.entry(record.epoch).or_default();
                if let Some(how) = upload.finished {
                    let reason = format!("epoch {} is already {how:?}", record.epoch).to_lowercase();
                    return Outcome::Failed { reason };
                }
                if upload.sealed {
                    let reason = format!("epoch {} is already pre-committed", record.epoch);
                    return Outcome::Failed { reason };
                }
                append_line(&mut upload.buffer, record);
                Outcome::Delivered
            })
            .collect();
        let full: Vec<u64> =
            epochs.iter().filter(|(_, u)| u.buffer.len() >= self.part_bytes).map(|(e, _)| *e).collect();
        for epoch in full {
            if let Some(upload) = epochs.get_mut(&epoch) {
                // A failed flush keeps the buffer; pre_commit tries again and decides the epoch.
                if let Err(e) = self.flush(epoch, upload).await {
                    tracing::warn!(sink = %self.name, epoch, error = %e, "part upload failed; will retry at pre-commit");
                }
            }
        }
        outcomes
    }

    /// Upload the buffer of `epoch` as its next part (starting the upload if needed).
    async fn flush(&self, epoch: u64, upload: &mut EpochUpload) -> Result<(), SinkError> {
        let key = self.object_key(epoch);
        let upload_id = match &upload.upload_id {
            Some(id) => id.clone(),
            None => {
                let created = self
                    .retrying("CreateMultipartUpload", || {
                        self.client
                            .create_multipart_upload()
                            .bucket(&self.bucket)
                            .key(&key)
                            .content_type("application/x-ndjson")
                            .send()
                    })
                    .await?;
                let id =
                    created.upload_id().ok_or_else(|| self.error("CreateMultipartUpload: no upload id"))?;
                upload.upload_id.insert(id.to_owned()).clone()
            }
        };
        let part_number = i32::try_from(upload.parts.len() + 1).map_err(|_| self.error("too many parts"))?;
        let body = bytes::Bytes::from(std::mem::take(&mut upload.buffer));
        let sent = self
            .retrying("UploadPart", || {
                self.client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(&key)
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

    /// `(key, upload id)` of the uploads pending under a reader's epoch, oldest first.
    async fn pending_uploads(&self, reader: &str, epoch: u64) -> Result<Vec<(String, String)>, SinkError> {
        let prefix = epoch_prefix(&self.prefix, reader, epoch);
        let mut found = Vec::new();
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        // Bounded: an epoch of one reader has a handful of incarnations at most.
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
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let call_started = Instant::now();
            let result = call().await;
            self.stats.record_request(call_started.elapsed());
            let failure = match result {
                Ok(value) => return Ok(value),
                Err(e) => aws_error::classify(&e),
            };
            let delay = match &failure {
                AwsFailure::Fatal { .. } => None,
                AwsFailure::Transient { kind, .. } => match self.policy.classify(kind) {
                    Class::Permanent => None,
                    Class::Transient { hint } => {
                        self.policy.next_delay(attempt, started.elapsed(), hint, fastrand::f64())
                    }
                },
            };
            let Some(delay) = delay else {
                return Err(self.error(format!("{what}: {} (after {attempt} attempts)", failure.reason())));
            };
            self.stats.record_retry();
            tokio::time::sleep(delay).await;
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

    fn stats(&self) -> Option<Arc<SinkStats>> {
        Some(self.stats.clone())
    }

    fn pre_commit(&self, epoch: u64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            let mut epochs = self.epochs.lock().await;
            let Some(upload) = epochs.get_mut(&epoch) else { return Ok(()) };
            match upload.finished {
                Some(Finished::Committed) => return Ok(()),
                Some(Finished::Aborted) => return Err(self.error(format!("epoch {epoch} was aborted"))),
                None => {}
            }
            if !upload.buffer.is_empty() {
                self.flush(epoch, upload).await?;
            }
            upload.sealed = true;
            Ok(())
        })
    }

    fn commit(&self, epoch: u64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            let mut epochs = self.epochs.lock().await;
            let Some(upload) = epochs.get_mut(&epoch) else {
                drop(epochs);
                return self.commit_for(&self.reader, epoch).await;
            };
            match upload.finished {
                Some(Finished::Committed) => return Ok(()),
                Some(Finished::Aborted) => return Err(self.error(format!("epoch {epoch} was aborted"))),
                None => {}
            }
            if !upload.buffer.is_empty() {
                self.flush(epoch, upload).await?;
            }
            if let Some(upload_id) = upload.upload_id.clone() {
                let key = self.object_key(epoch);
                self.complete(&key, &upload_id, upload.parts.clone()).await?;
                // Uploads of earlier incarnations under this epoch never acked it.
                for (stale_key, stale_id) in self.pending_uploads(&self.reader, epoch).await? {
                    self.abort_upload(&stale_key, &stale_id).await?;
                }
            }
            epochs.insert(epoch, EpochUpload::finished(Finished::Committed));
            prune(&mut epochs);
            Ok(())
        })
    }

    fn abort(&self, epoch: u64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            let mut epochs = self.epochs.lock().await;
            let previous = epochs.insert(epoch, EpochUpload::finished(Finished::Aborted));
            prune(&mut epochs);
            match previous {
                Some(EpochUpload { finished: Some(Finished::Committed), .. }) => {
                    epochs.insert(epoch, EpochUpload::finished(Finished::Committed));
                    return Err(self.error(format!("epoch {epoch} is committed; it cannot be aborted")));
                }
                Some(EpochUpload { upload_id: Some(upload_id), finished: None, .. }) => {
                    self.abort_upload(&self.object_key(epoch), &upload_id).await?;
                }
                _ => {}
            }
            drop(epochs);
            self.abort_for(&self.reader, epoch).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_open_epochs_and_the_newest_finished() {
        let mut epochs = BTreeMap::new();
        for epoch in 1..=100 {
            epochs.insert(epoch, EpochUpload::finished(Finished::Committed));
        }
        epochs.insert(3, EpochUpload::default());
        prune(&mut epochs);
        assert!(epochs.contains_key(&3), "an open epoch is never forgotten");
        assert_eq!(epochs.len(), REMEMBERED_EPOCHS + 1);
        assert!(epochs.contains_key(&100) && !epochs.contains_key(&36) && epochs.contains_key(&37));
    }
}
