//! How reader pods obtain AWS credentials.
//!
//! Secrets are never written inline: a source uses the pod's default chain (IRSA, Pod Identity,
//! env), assumes a role, or points at a Kubernetes Secret. Exactly one mode is in force, so the
//! rules below reject fields that would be silently ignored under the chosen `source`.
//!
//! An assumed role sits on top of the pod's own identity (IRSA or EKS Pod Identity, both through
//! the ServiceAccount). It is handed to the reader in its `source.yaml`, never as `AWS_ROLE_ARN`:
//! that variable belongs to the EKS pod identity webhook, and a second value in it would replace
//! the web identity the role is assumed from.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where AWS credentials come from: `DefaultChain` (the SDK's default chain: env, IRSA, Pod
/// Identity, instance profile), `AssumeRole` (assume `roleArn` from the default chain's identity)
/// or `Secret` (static keys from the Secret named in `secretRef`). Default `DefaultChain`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum CredentialSource {
    // The SDK default chain.
    #[default]
    DefaultChain,
    // sts:AssumeRole on `roleArn`.
    AssumeRole,
    // Keys read from a Kubernetes Secret.
    Secret,
}

/// AWS credentials for the readers and the operator's queue polling: one mode, chosen by
/// `source`. Default: the default chain.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.source != 'AssumeRole' || has(self.roleArn)")
        .field_path(".roleArn")
        .message("spec.credentials.roleArn is required when source is AssumeRole: add the role ARN or choose another source"),
    validation = Rule::new("!has(self.roleArn) || self.source == 'AssumeRole'")
        .field_path(".roleArn")
        .message("spec.credentials.roleArn is only used when source is AssumeRole: remove roleArn or set source: AssumeRole"),
    validation = Rule::new("!has(self.externalId) || self.source == 'AssumeRole'")
        .field_path(".externalId")
        .message("spec.credentials.externalId is only used when source is AssumeRole: remove externalId or set source: AssumeRole"),
    validation = Rule::new("!has(self.sessionName) || self.source == 'AssumeRole'")
        .field_path(".sessionName")
        .message("spec.credentials.sessionName is only used when source is AssumeRole: remove sessionName or set source: AssumeRole"),
    validation = Rule::new("self.source != 'Secret' || has(self.secretRef)")
        .field_path(".secretRef")
        .message("spec.credentials.secretRef is required when source is Secret: name the Secret holding the keys or choose another source"),
    validation = Rule::new("!has(self.secretRef) || self.source == 'Secret'")
        .field_path(".secretRef")
        .message("spec.credentials.secretRef is only used when source is Secret: remove secretRef or set source: Secret"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credentials {
    /// Credential mode: `DefaultChain`, `AssumeRole` (needs `roleArn`) or `Secret` (needs
    /// `secretRef`). Default `DefaultChain`.
    #[serde(default)]
    pub source: CredentialSource,
    /// IAM role to assume, `arn:aws:iam::ACCOUNT:role/NAME`. Required with, and only allowed with,
    /// `source: AssumeRole`. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$')")
        .message("spec.credentials.roleArn must look like arn:aws:iam::123456789012:role/NAME: copy the role's ARN"))]
    pub role_arn: Option<String>,
    /// External id passed to sts:AssumeRole (2-1224 characters). Only with `source: AssumeRole`.
    /// No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 1224))]
    pub external_id: Option<String>,
    /// Role session name for sts:AssumeRole, shown in CloudTrail (2-64 characters: letters,
    /// digits and `+=,.@_-`). Only with `source: AssumeRole`. Absent: the reader pod's name for
    /// readers, `sluice-operator` for the operator's queue metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 64))]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z0-9+=,.@_-]+$')")
        .message("spec.credentials.sessionName may hold only letters, digits and +=,.@_-: fix the name"))]
    pub session_name: Option<String>,
    /// The Secret holding static keys. Required with, and only allowed with, `source: Secret`.
    /// No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretCredentialsRef>,
}

/// A Secret in the source's namespace that holds static AWS keys.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretCredentialsRef {
    /// Name of the Secret, in the SqsSource's namespace (1-253 characters). Required.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key of the access key id in the Secret (1-253 characters). Default `AWS_ACCESS_KEY_ID`.
    #[serde(default = "default_access_key_id_key")]
    #[schemars(length(min = 1, max = 253))]
    pub access_key_id_key: String,
    /// Key of the secret access key in the Secret (1-253 characters). Default
    /// `AWS_SECRET_ACCESS_KEY`.
    #[serde(default = "default_secret_access_key_key")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_access_key_key: String,
    /// Key of a session token in the Secret (1-253 characters). Absent: `AWS_SESSION_TOKEN` is
    /// used if the Secret has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub session_token_key: Option<String>,
}

fn default_access_key_id_key() -> String {
    "AWS_ACCESS_KEY_ID".into()
}
fn default_secret_access_key_key() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}
