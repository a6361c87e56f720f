//! One object of the `s3` sink as it is written: raw JSON lines in, compressed parts out.
//!
//! Why lines go through a raw buffer before the encoder: a line is appended where it is built
//! (`s3_layout::append_line`, or piece by piece for a streamed object), synchronously; the
//! buffer is fed to the encoder only when a part may be due, and a part is uploaded only when the
//! encoder has produced `part_bytes` (S3 refuses parts under 5 MiB but the last). So memory per
//! object is at most one raw part and one compressed part, whatever the object's size.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedPart, ServerSideEncryption};
use sluice_crds::S3Compression;

use super::SinkError;
use super::s3::S3Sink;
use super::s3_encode::{Encoder, content_encoding};

/// An object being written: its key, its upload (once a part is due) and what is not uploaded yet.
pub struct ObjectUpload {
    pub key: String,
    /// The rendered `keyTemplate` its records fall in.
    pub partition: String,
    pub upload_id: Option<String>,
    /// Raw JSON lines not yet fed to the encoder.
    pub buffer: Vec<u8>,
    encoder: Encoder,
    /// Raw bytes fed to the encoder so far.
    fed: usize,
    pub parts: Vec<CompletedPart>,
    pub records: usize,
    /// Takes no more records (a buffer hint was reached, or the epoch was pre-committed).
    pub closed: bool,
    /// The encoder's stream is ended (its trailer written).
    ended: bool,
}

impl ObjectUpload {
    pub fn new(key: String, partition: String, compression: S3Compression) -> Self {
        Self {
            key,
            partition,
            upload_id: None,
            buffer: Vec::new(),
            encoder: Encoder::new(compression),
            fed: 0,
            parts: Vec::new(),
            records: 0,
            closed: false,
            ended: false,
        }
    }

    /// Uncompressed bytes of the lines written so far.
    pub fn raw_bytes(&self) -> usize {
        self.fed + self.buffer.len()
    }

    /// Every byte is uploaded as a part (after `upload_ready(.., true)`).
    fn done(&mut self) -> bool {
        self.ended && self.buffer.is_empty() && self.encoder.ready() == 0
    }

    /// Feed the raw buffer to the encoder (and end the stream when `last`).
    async fn encode(&mut self, last: bool) -> std::io::Result<()> {
        if !self.buffer.is_empty() {
            let raw = std::mem::take(&mut self.buffer);
            self.encoder.write(&raw).await?;
            self.fed += raw.len();
        }
        if last && !self.ended {
            self.encoder.finish().await?;
            self.ended = true;
        }
        Ok(())
    }
}

impl S3Sink {
    /// Upload what `upload` has produced as its next part once it holds `part_bytes`, or, when
    /// `last`, everything left (ending the stream). A failure keeps the bytes for the next try.
    pub(super) async fn upload_ready(&self, upload: &mut ObjectUpload, last: bool) -> Result<(), SinkError> {
        if last && upload.done() {
            return Ok(());
        }
        let key = upload.key.clone();
        upload.encode(last).await.map_err(|e| self.error(format!("compressing {key}: {e}")))?;
        if upload.encoder.ready() == 0 || (!last && upload.encoder.ready() < self.part_bytes) {
            return Ok(());
        }
        let upload_id = match &upload.upload_id {
            Some(upload_id) => upload_id.clone(),
            None => upload.upload_id.insert(self.create_upload(&key).await?).clone(),
        };
        let part_number = i32::try_from(upload.parts.len() + 1).map_err(|_| self.error("too many parts"))?;
        let body = bytes::Bytes::from(upload.encoder.take());
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
                upload.encoder.restore(body.to_vec());
                Err(e)
            }
        }
    }

    async fn create_upload(&self, key: &str) -> Result<String, SinkError> {
        let created = self
            .retrying("CreateMultipartUpload", || {
                self.client
                    .create_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .content_type("application/x-ndjson")
                    .set_content_encoding(content_encoding(self.layout.compression).map(str::to_owned))
                    .set_server_side_encryption(self.kms_key.as_ref().map(|_| ServerSideEncryption::AwsKms))
                    .set_ssekms_key_id(self.kms_key.clone())
                    .send()
            })
            .await?;
        created
            .upload_id()
            .map(str::to_owned)
            .ok_or_else(|| self.error("CreateMultipartUpload: no upload id"))
    }

    /// At-least-once: make `upload` a visible object now: one PutObject if no part was uploaded
    /// yet, else its last part and CompleteMultipartUpload.
    pub(super) async fn write_object(&self, upload: &mut ObjectUpload) -> Result<(), SinkError> {
        if upload.upload_id.is_none() {
            let key = upload.key.clone();
            upload.encode(true).await.map_err(|e| self.error(format!("compressing {key}: {e}")))?;
            let body = bytes::Bytes::from(upload.encoder.take());
            let sent = self
                .retrying("PutObject", || {
                    self.client
                        .put_object()
                        .bucket(&self.bucket)
                        .key(&key)
                        .content_type("application/x-ndjson")
                        .set_content_encoding(content_encoding(self.layout.compression).map(str::to_owned))
                        .set_server_side_encryption(
                            self.kms_key.as_ref().map(|_| ServerSideEncryption::AwsKms),
                        )
                        .set_ssekms_key_id(self.kms_key.clone())
                        .body(ByteStream::from(body.clone()))
                        .send()
                })
                .await;
            if sent.is_err() {
                upload.encoder.restore(body.to_vec());
            }
            return sent.map(|_| ());
        }
        self.upload_ready(upload, true).await?;
        let upload_id = upload.upload_id.clone().unwrap_or_default();
        self.complete(&upload.key, &upload_id, upload.parts.clone()).await
    }

    /// An at-least-once object that will not be written: abort its upload, if one was started.
    pub(super) async fn abandon(&self, upload: &ObjectUpload) {
        if let Some(upload_id) = &upload.upload_id
            && let Err(e) = self.abort_upload(&upload.key, upload_id).await
        {
            tracing::warn!(sink = %self.name, key = %upload.key, error = %e, "aborting an abandoned upload failed");
        }
    }
}
