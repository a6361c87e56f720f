//! The readers' ServiceAccount: the one place a reader pod's cloud identity is attached.
//!
//! Why per source by default: on EKS the IAM role follows the ServiceAccount (IRSA's
//! `eks.amazonaws.com/role-arn` annotation, or a Pod Identity association naming the account),
//! so one account per source gives each source exactly the queues and sinks its role allows.
//! Using an existing account lets a platform team manage accounts and associations themselves.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Which ServiceAccount the reader pods run as.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.create || has(self.name)")
        .field_path(".name")
        .message("spec.reader.serviceAccount.name is required when create is false: name the existing ServiceAccount or set create: true"),
    validation = Rule::new("self.create || !has(self.annotations) || self.annotations.size() == 0")
        .field_path(".annotations")
        .message("spec.reader.serviceAccount.annotations apply only to an account the operator creates: annotate the existing ServiceAccount yourself or set create: true"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReaderServiceAccount {
    /// Create the ServiceAccount (owned by the source, deleted with it). With `false`, `name`
    /// must name an existing account in the source's namespace. Default true.
    #[serde(default = "default_true")]
    pub create: bool,
    /// Account name, a DNS subdomain of 1-253 characters. Default `<source>-reader` when created;
    /// required when `create` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')")
        .message("spec.reader.serviceAccount.name must be a ServiceAccount name (lowercase letters, digits, - and .): fix the name"))]
    pub name: Option<String>,
    /// Annotations of the created account, at most 16, each value at most 4096 characters, e.g.
    /// `eks.amazonaws.com/role-arn: arn:aws:iam::ACCOUNT:role/NAME` for IRSA. Only with
    /// `create: true`. A change rolls the readers (their pod template carries a hash of these
    /// annotations), since the EKS webhook fixes a pod's identity when the pod is created.
    /// Default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    pub annotations: BTreeMap<String, String>,
}

impl Default for ReaderServiceAccount {
    fn default() -> Self {
        Self { create: true, name: None, annotations: BTreeMap::new() }
    }
}

fn default_true() -> bool {
    true
}
