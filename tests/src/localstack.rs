//! LocalStack fixture: an SQS (and S3) endpoint on loopback for integration tests.
//!
//! Why: every integration test needs a real SQS wire protocol, and a fresh machine has none. Rather than
//! asking the developer to start something first, [`LocalStack::ensure`] checks the endpoint and, when it is
//! down, runs the project's own launcher (`tests/scripts/localstack.sh start`, which installs a pinned
//! LocalStack into `.sluice/` on first use). The launcher runs at most once per process and serialises
//! itself with a file lock, so parallel test processes share one server. A server started this way
//! keeps running after the tests for the next run; `scripts/test.sh` stops the one it started.
//!
//! Each test then makes its own randomly named queues ([`TestQueue`]), so tests never see each other's
//! messages and no cleanup between runs is needed (LocalStack loses all queues on restart anyway).

mod queue;

pub use queue::{Outgoing, QueueCounts, QueueOptions, Redrive, SendOptions, TestQueue, body_for, seq_of};

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::sync::OnceCell;

/// Where the tests look for LocalStack unless `SLUICE_LOCALSTACK_ENDPOINT` says otherwise.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4566";
/// The region every test client uses; LocalStack's queue URLs carry it.
pub const REGION: &str = "us-east-1";

/// The launcher, found from this crate's directory so it works from any working directory.
const LAUNCHER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/localstack.sh");
/// Upper bound for the launcher: a clean install (about 50 s) plus its own 90 s health wait, with margin.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(600);

/// Outcome of this process's single launcher run, shared by every test in it.
static LAUNCHED: OnceCell<Result<(), String>> = OnceCell::const_new();

/// Handle to the shared LocalStack server.
pub struct LocalStack;

impl LocalStack {
    /// The endpoint the tests use: `SLUICE_LOCALSTACK_ENDPOINT`, or [`DEFAULT_ENDPOINT`].
    pub fn endpoint() -> String {
        std::env::var("SLUICE_LOCALSTACK_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// Returns a healthy endpoint, starting LocalStack first if nothing answers there.
    ///
    /// Only a loopback endpoint is started; any other endpoint is expected to be up already.
    pub async fn ensure() -> Result<String> {
        let endpoint = Self::endpoint();
        if is_healthy(&endpoint).await {
            return Ok(endpoint);
        }
        let port = loopback_port(&endpoint).with_context(|| {
            format!(
                "LocalStack at {endpoint} is not healthy, and only a 127.0.0.1 endpoint can be started here"
            )
        })?;
        LAUNCHED.get_or_init(|| launch(port)).await.clone().map_err(anyhow::Error::msg)?;
        if !is_healthy(&endpoint).await {
            bail!("LocalStack at {endpoint} is not healthy although the launcher reported success");
        }
        Ok(endpoint)
    }
}

/// True when `/_localstack/health` reports both SQS and S3 usable.
pub async fn is_healthy(endpoint: &str) -> bool {
    let Ok(client) = reqwest::Client::builder().timeout(Duration::from_secs(2)).build() else {
        return false;
    };
    let Ok(response) = client.get(format!("{endpoint}/_localstack/health")).send().await else {
        return false;
    };
    let Ok(body) = response.bytes().await else {
        return false;
    };
    services_ready(&body, &["sqs", "s3"])
}

/// Parses a health document: each named service must be `available` (lazy) or `running`.
fn services_ready(body: &[u8], services: &[&str]) -> bool {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    services.iter().all(|s| matches!(doc["services"][s].as_str(), Some("available" | "running")))
}

/// The port of an `http://127.0.0.1:PORT` endpoint; `None` for anything the launcher cannot serve.
fn loopback_port(endpoint: &str) -> Option<u16> {
    let rest = endpoint.strip_prefix("http://127.0.0.1")?;
    match rest.trim_end_matches('/') {
        "" => Some(80),
        port => port.strip_prefix(':')?.parse().ok(),
    }
}

async fn launch(port: u16) -> Result<(), String> {
    let run = tokio::process::Command::new("bash")
        .arg(LAUNCHER)
        .arg("start")
        .env("SLUICE_LOCALSTACK_PORT", port.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(LAUNCH_TIMEOUT, run).await {
        Err(_) => return Err(format!("{LAUNCHER} start did not finish within {LAUNCH_TIMEOUT:?}")),
        Ok(Err(e)) => return Err(format!("could not run {LAUNCHER}: {e}")),
        Ok(Ok(output)) => output,
    };
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{LAUNCHER} start failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A fresh standard queue `PREFIX-RANDOM` with `visibility_seconds`, on the shared LocalStack
/// ([`LocalStack::ensure`] starts it when it does not answer); answers the endpoint with it.
pub async fn fresh_queue(prefix: &str, visibility_seconds: u32) -> Result<(String, TestQueue)> {
    let endpoint = LocalStack::ensure().await?;
    let options = QueueOptions::visibility(visibility_seconds);
    let queue = TestQueue::create_with(&sqs_client(&endpoint), prefix, false, &options).await?;
    Ok((endpoint, queue))
}

/// An SQS client for LocalStack: static test credentials, [`REGION`], no shared config files read.
pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "sluice-tests"))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// An S3 client for LocalStack; path-style addressing, since `bucket.127.0.0.1` does not resolve.
pub fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new("test", "test", None, None, "sluice-tests"))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_needs_every_service_usable() {
        let up = br#"{"services": {"sqs": "running", "s3": "available", "sns": "disabled"}}"#;
        assert!(services_ready(up, &["sqs", "s3"]));
        let s3_down = br#"{"services": {"sqs": "running", "s3": "disabled"}}"#;
        assert!(!services_ready(s3_down, &["sqs", "s3"]));
        assert!(!services_ready(br#"{"services": {}}"#, &["sqs"]));
        assert!(!services_ready(b"<html>", &["sqs"]));
    }

    #[test]
    fn only_loopback_endpoints_are_started() {
        assert_eq!(loopback_port("http://127.0.0.1:4566"), Some(4566));
        assert_eq!(loopback_port("http://127.0.0.1:4577/"), Some(4577));
        assert_eq!(loopback_port("http://127.0.0.1"), Some(80));
        assert_eq!(loopback_port("http://localstack:4566"), None);
        assert_eq!(loopback_port("https://127.0.0.1:4566"), None);
        assert_eq!(loopback_port("http://127.0.0.10:4566"), None);
    }
}
