//! The S3 side of the target checks: `HeadBucket` on each bucket an s3 sink names, with one
//! client per endpoint and region.
//!
//! Why HeadBucket: it is the cheapest call that tells "no such bucket" (404) from "not allowed"
//! (403) without listing or writing anything. An endpoint override (LocalStack, MinIO) uses
//! path-style addressing, as the readers do, since such servers rarely serve virtual hosts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::Region;

use super::QueueError;
use super::sqs::{bounded, classify};
use super::targets::Target;

type ClientKey = (Option<String>, Option<String>);

/// Checks buckets with the AWS SDK, caching a client per endpoint and region.
#[derive(Clone)]
pub struct Buckets {
    base: aws_config::SdkConfig,
    clients: Arc<Mutex<HashMap<ClientKey, Client>>>,
}

impl Buckets {
    pub fn new(base: aws_config::SdkConfig) -> Self {
        Self { base, clients: Arc::default() }
    }

    fn client(&self, endpoint: Option<&str>, region: Option<&str>) -> Client {
        let key = (endpoint.map(str::to_owned), region.map(str::to_owned));
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        clients
            .entry(key)
            .or_insert_with(|| {
                let mut config = aws_sdk_s3::config::Builder::from(&self.base);
                if let Some(endpoint) = endpoint {
                    config = config.endpoint_url(endpoint).force_path_style(true);
                }
                if let Some(region) = region {
                    config = config.region(Region::new(region.to_owned()));
                }
                Client::from_conf(config.interceptor(crate::aws_requests::COUNT_REQUESTS).build())
            })
            .clone()
    }

    /// Whether the bucket `target` names exists and the operator may see it.
    pub async fn head(&self, target: &Target) -> Result<(), QueueError> {
        let client = self.client(target.endpoint.as_deref(), target.region.as_deref());
        let call = client.head_bucket().bucket(&target.name).send();
        match bounded(call).await? {
            Ok(_) => Ok(()),
            // HeadBucket answers without a body: its status decides (404 missing, 403 denied).
            Err(e) => Err(classify("HeadBucket", &e)),
        }
    }
}
