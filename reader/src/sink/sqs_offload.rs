//! The `sqs` sink's offload of large bodies to S3, written the way the Amazon SQS Extended Client
//! writes them, so its Java and Python receivers (and this reader) read what the sink sends.
//!
//! Why the source MessageId is the object key: a record sent again (a retry, a redelivery) writes
//! the same object again instead of leaving an orphan beside it.

use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation};
use aws_sdk_s3::primitives::ByteStream;
use sluice_crds::SqsOffloadSpec;

use super::error::SinkBuildError;
use super::url::parse_http_url;
use crate::aws::describe;
use crate::aws::requests::Requests;
use crate::payload::pointer;
use crate::record::Record;

pub struct Offload {
    client: Client,
    bucket: String,
    /// Entries (body and attributes) larger than this are offloaded.
    pub threshold: usize,
}

impl Offload {
    /// `sink_endpoint` and `region` are the sink's own, used when the offload names none.
    pub fn new(
        spec: &SqsOffloadSpec,
        sink_endpoint: Option<&str>,
        region: Option<&str>,
        aws: &aws_config::SdkConfig,
        requests: &Arc<Requests>,
    ) -> Result<Self, SinkBuildError> {
        let mut config = aws_sdk_s3::config::Builder::from(aws)
            .retry_config(RetryConfig::disabled())
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired);
        let endpoint = spec.endpoint.as_deref().or(sink_endpoint);
        if let Some(endpoint) = endpoint {
            parse_http_url(endpoint).map_err(|m| SinkBuildError::new("sqs.offload.endpoint", m))?;
            // Endpoint overrides (LocalStack, MinIO) serve buckets by path, not by host name.
            config = config.endpoint_url(endpoint).force_path_style(true);
        }
        if let Some(region) = region {
            config = config.region(Region::new(region.to_owned()));
        }
        Ok(Self {
            client: Client::from_conf(config.interceptor(requests.interceptor()).build()),
            bucket: spec.bucket.clone(),
            threshold: usize::try_from(spec.threshold_bytes).unwrap_or(usize::MAX),
        })
    }

    /// The record as it is sent: its body written to S3, a pointer and the size attribute in its
    /// place. `Err`: the write failed (the record goes back to the queue and is tried again).
    pub async fn offload(&self, record: &Arc<Record>) -> Result<Arc<Record>, String> {
        let key = &record.message_id;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(record.body.clone()))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "PutObject s3://{}/{key} for sqs.offload failed: {}: check the bucket exists and the reader may s3:PutObject to it",
                    self.bucket,
                    describe(&e)
                )
            })?;
        let mut sent = Record::clone(record);
        sent.body = pointer::write(&self.bucket, key).into();
        sent.message_attributes.insert(pointer::SIZE_ATTRIBUTE.to_owned(), record.body.len().to_string());
        sent.attribute_types.insert(pointer::SIZE_ATTRIBUTE.to_owned(), "Number".to_owned());
        Ok(Arc::new(sent))
    }
}
