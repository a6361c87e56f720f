//! AWS plumbing shared by intake, settle and the AWS sinks: the credential chain, one SQS client
//! per endpoint, the queues (`queue`), and how an SDK error is named (metrics) and told (logs,
//! configuration errors).
//!
//! Why one client per distinct (endpoint, region): a client owns a connection pool, and queues
//! on the same endpoint should share it; a LocalStack override on one queue must not redirect
//! the others.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::SharedCredentialsProvider;

use crate::config::settings::CredentialSettings;
use requests::Requests;

pub mod queue;
pub mod receive_tally;
pub mod redrive;
pub mod requests;
pub mod visibility;

/// The default chain (environment, profile, web identity, Pod Identity, IMDS), optionally
/// assuming a role on top of it, in a session named by the spec or else `reader_id`.
/// An assumed role's AssumeRole calls count in `requests`.
pub async fn load_sdk_config(
    credentials: &CredentialSettings,
    reader_id: &str,
    requests: &Arc<Requests>,
) -> SdkConfig {
    let base = aws_config::defaults(BehaviorVersion::latest()).load().await;
    match credentials {
        CredentialSettings::DefaultChain => base,
        CredentialSettings::AssumeRole { role_arn, external_id, session_name } => {
            let session_name = session_name.as_deref().unwrap_or(reader_id);
            let mut builder =
                aws_config::sts::AssumeRoleProvider::builder(role_arn).session_name(session_name);
            if let Some(id) = external_id {
                builder = builder.external_id(id);
            }
            let provider = builder.configure(&base).build().await;
            let provider = SharedCredentialsProvider::new(requests.credentials(provider));
            base.into_builder().credentials_provider(provider).build()
        }
    }
}

/// Builds and shares SQS clients keyed by endpoint and region, each counting its requests in the
/// reader's `requests`.
pub struct SqsClients {
    base: SdkConfig,
    requests: Arc<Requests>,
    clients: HashMap<(Option<String>, Option<String>), aws_sdk_sqs::Client>,
}

impl SqsClients {
    pub fn new(base: SdkConfig, requests: Arc<Requests>) -> Self {
        Self { base, requests, clients: HashMap::new() }
    }

    pub fn base(&self) -> &SdkConfig {
        &self.base
    }

    /// Where the reader's requests are counted (for the other clients it builds).
    pub fn requests(&self) -> &Arc<Requests> {
        &self.requests
    }

    pub fn client(&mut self, endpoint: Option<&str>, region: Option<&str>) -> aws_sdk_sqs::Client {
        let key = (endpoint.map(str::to_owned), region.map(str::to_owned));
        let (base, requests) = (&self.base, &self.requests);
        self.clients
            .entry(key)
            .or_insert_with(|| {
                let mut config = aws_sdk_sqs::config::Builder::from(base).timeout_config(
                    aws_config::timeout::TimeoutConfig::builder()
                        .connect_timeout(Duration::from_secs(3))
                        .build(),
                );
                if let Some(endpoint) = endpoint {
                    config = config.endpoint_url(endpoint);
                }
                if let Some(region) = region {
                    config = config.region(Region::new(region.to_owned()));
                }
                aws_sdk_sqs::Client::from_conf(config.interceptor(requests.interceptor()).build())
            })
            .clone()
    }
}

/// The one-line text of a failed call and the `error_type` label of the error counters: the same
/// words the operator uses (`sluice_aws::fault`).
pub use sluice_aws::{describe, error_type};
