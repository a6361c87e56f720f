//! AWS plumbing shared by intake, settle and the AWS sinks: the credential chain, one SQS client
//! per endpoint, the queues (`queue`), and how an SDK error is named (metrics) and told (logs,
//! configuration errors).
//!
//! Why one client per distinct (endpoint, region): a client owns a connection pool, and queues
//! on the same endpoint should share it; a LocalStack override on one queue must not redirect
//! the others.

use std::collections::HashMap;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::SharedCredentialsProvider;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::config::settings::CredentialSettings;

pub mod queue;
pub mod receive_tally;
pub mod redrive;
pub mod requests;

/// The default chain (environment, profile, web identity, Pod Identity, IMDS), optionally
/// assuming a role on top of it, in a session named by the spec or else `reader_id`.
pub async fn load_sdk_config(credentials: &CredentialSettings, reader_id: &str) -> SdkConfig {
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
            let provider = SharedCredentialsProvider::new(requests::CountedCredentials(provider));
            base.into_builder().credentials_provider(provider).build()
        }
    }
}

/// Builds and shares SQS clients keyed by endpoint and region.
pub struct SqsClients {
    base: SdkConfig,
    clients: HashMap<(Option<String>, Option<String>), aws_sdk_sqs::Client>,
}

impl SqsClients {
    pub fn new(base: SdkConfig) -> Self {
        Self { base, clients: HashMap::new() }
    }

    pub fn base(&self) -> &SdkConfig {
        &self.base
    }

    pub fn client(&mut self, endpoint: Option<&str>, region: Option<&str>) -> aws_sdk_sqs::Client {
        let key = (endpoint.map(str::to_owned), region.map(str::to_owned));
        let base = &self.base;
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
                aws_sdk_sqs::Client::from_conf(config.interceptor(requests::CountRequests).build())
            })
            .clone()
    }
}

/// A short name for an SDK error: the service's error code, or the kind of failure.
pub fn error_type<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> String {
    match err {
        SdkError::ServiceError(_) => err.code().unwrap_or("service").to_owned(),
        SdkError::TimeoutError(_) => "timeout".into(),
        SdkError::DispatchFailure(_) => "dispatch".into(),
        SdkError::ResponseError(_) => "response".into(),
        SdkError::ConstructionFailure(_) => "construction".into(),
        _ => "unknown".into(),
    }
}

/// An SDK error in one line, for logs and configuration messages: the service's code and message
/// when it answered, else the cause chain (an `SdkError`'s own text is only its variant name).
pub fn describe<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}
