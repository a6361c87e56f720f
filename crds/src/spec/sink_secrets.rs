//! Secret material of an HTTP sink: header values (tokens) and a CA bundle, by reference.
//!
//! Why references and files: the source's spec is rendered whole into the readers' config
//! ConfigMap, so anything written inline there is readable by everyone who may read ConfigMaps.
//! A reference names a key of a Secret in the source's namespace; the operator mounts the key
//! read-only into the reader pod at `<SLUICE_SECRETS_DIR>/<secret>/<key>` (default directory
//! `/var/run/sluice/secrets`), never reading it itself. A mounted Secret is updated in place by
//! the kubelet when it is rotated, so the reader rereads the file instead of restarting.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Header values and the CA bundle of an HTTP sink, taken from Secrets.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpSecretRefs {
    /// Request headers whose values come from Secrets, at most 16, names unique, e.g.
    /// `Authorization` from a Secret key holding `Bearer <token>`. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name.lowerAscii() == a.name.lowerAscii()))")
        .reason(Reason::FieldValueDuplicate)
        .message("spec.sinks[].http.secretRefs.headers names a header twice: keep one entry per header"))]
    pub headers: Vec<SecretHeader>,
    /// PEM bundle of the CA certificates that sign the endpoint's TLS certificate, added to the
    /// system roots (for a private CA). Absent: the system roots only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<SecretKeyRef>,
}

/// One request header whose value is a Secret key.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretHeader {
    /// Header name, an HTTP token of 1-256 characters, e.g. `Authorization`. Required.
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(r"self.matches('^[!#$%&*+.^_`|~0-9A-Za-z-]+$')")
        .message("spec.sinks[].http.secretRefs.headers[].name must be an HTTP header name (letters, digits and !#$%&*+.^_`|~-): fix the name"))]
    pub name: String,
    /// The Secret key holding the header's value. Required.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the source's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name, a DNS subdomain of 1-253 characters. Required.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')")
        .message("secretKeyRef.name must be a Secret name (lowercase letters, digits, - and .): fix the name"))]
    pub name: String,
    /// Key in the Secret's data, 1-253 letters, digits, `-`, `_` and `.`. Required.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[-._a-zA-Z0-9]+$')")
        .message("secretKeyRef.key must be a Secret key (letters, digits, -, _ and .): fix the key"))]
    pub key: String,
}
