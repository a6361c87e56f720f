//! LocalStack for the sqs and s3 sink tests.
//!
//! Why these tests fail, not skip, without LocalStack: a sink test that passes because nothing
//! ran proves nothing. Start it with `bash tests/scripts/localstack.sh start`, or point
//! `SLUICE_LOCALSTACK_ENDPOINT` at one that runs SQS and S3.

use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4566";

pub fn endpoint() -> String {
    std::env::var("SLUICE_LOCALSTACK_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

/// An SDK config for LocalStack, after checking that it answers; panics with what to do if not.
pub async fn localstack() -> SdkConfig {
    let endpoint = endpoint();
    let health = format!("{endpoint}/_localstack/health");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    let answer = client.get(&health).send().await.and_then(|r| r.error_for_status());
    if let Err(e) = answer {
        panic!(
            "LocalStack is not reachable at {endpoint} ({e}); start it with \
             `bash tests/scripts/localstack.sh start` or set SLUICE_LOCALSTACK_ENDPOINT"
        );
    }
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "sluice-tests"))
        .endpoint_url(endpoint)
        .load()
        .await
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}
