//! Payloads that live in S3: the objects an S3 event notification names, and the body an
//! Extended Client pointer stands for, fetched and put in the record before delivery.
//!
//! Why at intake and not in a sink: every sink, the dead-letter route and the rate limit must see
//! the object, not the message that names it, and the fetch decides the message's fate as a
//! decode does (a missing object is poison, a TestEvent is acknowledged without delivery). The
//! record keeps its SQS identity (message id, receipt, epoch); the object's identity travels as
//! `sluice-s3*` message attributes, which the http sink sends as CloudEvents extensions
//! (`ce-sluices3bucket`, ...) and the other sinks write as attributes.
//!
//! One object per message: S3 and EventBridge send one record per notification. A notification
//! that names several objects is poison (its objects could not be settled one by one).

use std::sync::Arc;

use bytes::Bytes;
use sluice_crds::PayloadFormat;

use crate::config::payload::PayloadSettings;
use crate::process::fetch_stats::FetchStats;
use crate::process::metrics::Metrics;
use crate::record::{Payload, Record};

pub mod cleanup;
mod cleanup_task;
pub mod events;
pub mod fetch;
pub mod hold;
pub mod notification;
pub mod pointer;
pub mod stream;
#[cfg(test)]
mod stream_tests;

pub use fetch::{FetchError, Fetched, Fetcher};
pub use stream::StreamSource;

use notification::{Notification, ObjectEvent};

/// The metadata attributes a fetched object carries (CloudEvents: `ce-sluices3bucket`, ...).
pub const BUCKET: &str = "sluice-s3bucket";
pub const KEY: &str = "sluice-s3key";
pub const VERSION_ID: &str = "sluice-s3versionid";
pub const SIZE: &str = "sluice-s3size";
pub const ETAG: &str = "sluice-s3etag";
pub const EVENT_NAME: &str = "sluice-s3eventname";

/// What becomes of a message once its payload is resolved.
pub enum Resolution {
    /// Deliver it (the object's content as its body, or the message untouched).
    Deliver(Record),
    /// Cannot be delivered: the dead-letter sink gets it with the reason.
    Poison(Record, String),
    /// Delete it without delivery (`s3:TestEvent`).
    Acknowledge(Record),
    /// A transient failure outlasted the fetch's own few retries. `hold::resolve` retries such a
    /// message in-process and answers this only when the reader stops (or the hold nears SQS's
    /// 12 h visibility cap): the message then goes back to the queue.
    Release(Record, String),
}

pub struct Resolver {
    format: PayloadFormat,
    pointers: bool,
    fetcher: Fetcher,
    /// `spec.payload.s3.buckets`: the only buckets fetched from (empty: any).
    buckets: Vec<String>,
}

impl Resolver {
    pub fn new(format: PayloadFormat, pointers: bool, fetcher: Fetcher, buckets: Vec<String>) -> Self {
        Self { format, pointers, fetcher, buckets }
    }

    /// The object's bytes, if its bucket is one the spec allows.
    async fn fetch(&self, bucket: &str, key: &str, version: Option<&str>) -> Result<Bytes, FetchError> {
        self.allowed(bucket, key)?;
        self.fetcher.fetch(bucket, key, version).await
    }

    fn allowed(&self, bucket: &str, key: &str) -> Result<(), FetchError> {
        if !self.buckets.is_empty() && !self.buckets.iter().any(|b| b == bucket) {
            return Err(FetchError::Permanent(format!(
                "s3://{bucket}/{key}: bucket {bucket} is not in spec.payload.s3.buckets: add it there to have its objects fetched"
            )));
        }
        Ok(())
    }

    /// Whether messages of `format` need this resolver at all.
    pub fn needed(format: PayloadFormat, pointers: bool) -> bool {
        pointers || format == PayloadFormat::S3Notification
    }

    pub fn stats(&self) -> Arc<FetchStats> {
        self.fetcher.stats.clone()
    }

    /// The S3 client objects are fetched with (and Extended Client objects deleted with).
    /// What sinks read streamed objects through (`sink::SinkContext::objects`).
    pub fn streams(&self) -> Arc<StreamSource> {
        self.fetcher.streams().clone()
    }

    pub fn client(&self) -> &aws_sdk_s3::Client {
        self.fetcher.client()
    }

    /// Resolve one decoded record.
    pub async fn resolve(&self, record: Record) -> Resolution {
        if self.format == PayloadFormat::S3Notification {
            return self.notification(record).await;
        }
        if self.pointers
            && let Some(found) = pointer::parse(&record.body, &record.message_attributes)
        {
            return self.pointer(record, found).await;
        }
        Resolution::Deliver(record)
    }

    async fn notification(&self, record: Record) -> Resolution {
        let parsed = match &record.payload {
            Payload::Json(value) => notification::parse(value),
            Payload::Raw => Err("not JSON".to_owned()),
        };
        let objects = match parsed {
            Ok(Notification::Test) => return Resolution::Acknowledge(record),
            Ok(Notification::Objects(objects)) => objects,
            Err(reason) => return Resolution::Poison(record, reason),
        };
        let object = match <[ObjectEvent; 1]>::try_from(objects) {
            Ok([object]) => object,
            Err(objects) => {
                let reason = format!(
                    "the notification names {} objects; one object per message is supported (S3 sends one)",
                    objects.len()
                );
                return Resolution::Poison(record, reason);
            }
        };
        let mut record = record;
        tag(&mut record, &object);
        record.payload = Payload::Raw;
        if object.is_removal() {
            record.body = Bytes::new();
            return Resolution::Deliver(record);
        }
        let fetched = match self.allowed(&object.bucket, &object.key) {
            Ok(()) => {
                let version = object.version_id.as_deref();
                self.fetcher.fetch_or_refer(&object.bucket, &object.key, version, object.size).await
            }
            Err(e) => Err(e),
        };
        match fetched {
            Ok(Fetched::Whole(body)) => {
                record.body = body;
                Resolution::Deliver(record)
            }
            Ok(Fetched::Streamed(streamed)) => {
                // What intake checked (the event's own values are kept where it has them).
                let checked = &streamed;
                let attributes = &mut record.message_attributes;
                for (name, value) in [(VERSION_ID, &checked.version_id), (ETAG, &checked.etag)] {
                    if let Some(value) = value {
                        attributes.entry(name.to_owned()).or_insert_with(|| value.clone());
                    }
                }
                attributes.insert(SIZE.to_owned(), checked.size.to_string());
                // The body stays the notification: what a dead-letter sink receives.
                record.object = Some(Arc::new(streamed));
                Resolution::Deliver(record)
            }
            Err(FetchError::Permanent(reason)) => Resolution::Poison(record, reason),
            Err(FetchError::Transient(reason)) => Resolution::Release(record, reason),
        }
    }

    async fn pointer(&self, mut record: Record, found: pointer::Pointer) -> Resolution {
        match self.fetch(&found.bucket, &found.key, None).await {
            Ok(body) => {
                // The body is now what the sender sent: the size attribute the client added goes.
                record.message_attributes.remove(pointer::SIZE_ATTRIBUTE);
                record.message_attributes.remove(pointer::LEGACY_SIZE_ATTRIBUTE);
                record.attribute_types.remove(pointer::SIZE_ATTRIBUTE);
                record.attribute_types.remove(pointer::LEGACY_SIZE_ATTRIBUTE);
                record.body = body;
                if self.format == PayloadFormat::Json {
                    match serde_json::from_slice(&record.body) {
                        Ok(value) => record.payload = Payload::Json(value),
                        Err(e) => {
                            return Resolution::Poison(record, format!("payload is not valid JSON: {e}"));
                        }
                    }
                }
                Resolution::Deliver(record)
            }
            Err(FetchError::Permanent(reason)) => Resolution::Poison(record, reason),
            Err(FetchError::Transient(reason)) => Resolution::Release(record, reason),
        }
    }
}

/// The object's identity as message attributes.
fn tag(record: &mut Record, object: &ObjectEvent) {
    let mut put = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            record.message_attributes.insert(name.to_owned(), value);
        }
    };
    put(BUCKET, Some(object.bucket.clone()));
    put(KEY, Some(object.key.clone()));
    put(VERSION_ID, object.version_id.clone());
    put(SIZE, object.size.map(|s| s.to_string()));
    put(ETAG, object.etag.clone());
    put(EVENT_NAME, Some(object.event_name.clone()));
}

/// The resolver `settings` ask for, with its own S3 client (`None`: nothing to resolve).
pub fn build(
    settings: &PayloadSettings,
    aws: &aws_config::SdkConfig,
    metrics: &Arc<Metrics>,
) -> Option<Resolver> {
    if !Resolver::needed(settings.format, settings.pointers) {
        return None;
    }
    // The fetch retries on its own (bounded, with backoff); the SDK's retries would multiply them.
    // A streamed object is read only as fast as its sink writes it: the s3 sink stops reading
    // while it uploads a part, which the SDK's default stall grace (5 s) would take for a stalled
    // download on a slow or busy S3 endpoint.
    let stall = aws_sdk_s3::config::StalledStreamProtectionConfig::enabled()
        .grace_period(stream::STALL_GRACE)
        .build();
    let mut config = aws_sdk_s3::config::Builder::from(aws)
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .stalled_stream_protection(stall)
        .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired);
    if let Some(endpoint) = &settings.endpoint {
        config = config.endpoint_url(endpoint);
    }
    if settings.endpoint.is_some() || aws.endpoint_url().is_some() {
        // Endpoint overrides (LocalStack, MinIO) serve buckets by path, not by host name.
        config = config.force_path_style(true);
    }
    if let Some(region) = &settings.region {
        config = config.region(aws_sdk_s3::config::Region::new(region.clone()));
    }
    let client = aws_sdk_s3::Client::from_conf(config.interceptor(metrics.requests.interceptor()).build());
    let fetcher = Fetcher::new(client, settings.bounds, metrics.clone());
    Some(Resolver::new(settings.format, settings.pointers, fetcher, settings.buckets.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::payload::Bounds;
    use crate::sink::testing::record;

    fn resolver(buckets: &[&str]) -> Resolver {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build();
        let bounds = Bounds {
            max_object_bytes: 1024,
            max_concurrent_fetches: 1,
            max_bytes_in_flight: 1024,
            stream_above_bytes: 512,
        };
        let fetcher = Fetcher::new(aws_sdk_s3::Client::from_conf(config), bounds, Default::default());
        Resolver::new(PayloadFormat::Raw, true, fetcher, buckets.iter().map(|b| (*b).to_owned()).collect())
    }

    #[tokio::test]
    async fn a_pointer_outside_the_listed_buckets_is_poison_without_a_fetch() {
        let mut r = record("m");
        r.body = pointer::write("elsewhere", "k").into();
        match resolver(&["inbox"]).resolve(r).await {
            Resolution::Poison(_, reason) => {
                assert!(reason.contains("not in spec.payload.s3.buckets"), "{reason}");
            }
            _ => panic!("expected poison"),
        }
    }

    #[test]
    fn fetch_counts_reach_the_metrics_at_scrape_time() {
        let metrics = crate::process::metrics::Metrics::new();
        let stats = Arc::new(FetchStats::default());
        metrics.payload.watch(stats.clone());
        stats.fetched(2048);
        let text = metrics.encode();
        for line in [
            "sluice_reader_payload_objects_fetched_total 1",
            "sluice_reader_payload_fetched_bytes_total 2048",
            "sluice_reader_payload_held_bytes 2048",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[tokio::test]
    async fn bodies_that_are_not_pointers_pass_untouched() {
        match resolver(&[]).resolve(record("m")).await {
            Resolution::Deliver(r) => assert_eq!(&r.body[..], b"body-m"),
            _ => panic!("expected delivery"),
        }
    }
}
