//! How a message body is interpreted before it reaches the sinks.
//!
//! `s3Notification` exists because S3 event notifications carry only object keys; fetching the
//! objects in the reader spares every consumer from doing it.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Body format: `raw` (bytes passed through), `json` (must parse as JSON, else the message is a
/// poison message) or `s3Notification` (an S3 event notification; each named object is fetched
/// and delivered). Default `raw`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PayloadFormat {
    // Pass the body through.
    #[default]
    Raw,
    // Require a JSON body.
    Json,
    // Fetch the objects an S3 event names.
    S3Notification,
}

/// Message body handling. Default: raw.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayloadSpec {
    /// `raw`, `json` or `s3Notification`. Default `raw`.
    #[serde(default)]
    pub format: PayloadFormat,
}
