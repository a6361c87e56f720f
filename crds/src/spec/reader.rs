//! Pod-level settings of the reader Deployment that are not about SQS: image and logs, and the
//! shaping a platform team needs to run readers beside other workloads (resources, placement,
//! pod metadata, pull secrets, extra environment, the ServiceAccount).
//!
//! Kept apart from receive/delivery so that changing a log level never reads as a data-path change.
//! The Kubernetes types (tolerations, affinity, ...) are embedded as they are, so a manifest
//! written for a Deployment pastes in unchanged; each list is bounded here, and the names the
//! operator and the EKS pod identity webhook own are refused by the rules below.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, LocalObjectReference, Toleration, TopologySpreadConstraint,
};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

pub use super::pod_resources::{ReaderResources, ResourceAmounts};
pub use super::service_account::ReaderServiceAccount;

/// Reader pod settings. Default: the operator's own image, `info` logs, a grace period sized from
/// the receive and delivery settings, the default resources, and a ServiceAccount created per
/// source.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReaderSpec {
    /// Reader container image (1-1024 characters). Absent: the image the operator was built with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
    /// `RUST_LOG` filter for the readers, e.g. `info` or `sluice_reader=debug` (1-1024
    /// characters). Absent: `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub log_level: Option<String>,
    /// Pod terminationGracePeriodSeconds, 0-3600: time to drain on scale-down. Absent: sized from
    /// receive and delivery settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub termination_grace_period_seconds: Option<i64>,
    /// CPU and memory of the reader container. Absent: requests 100m CPU and 48Mi memory, a 256Mi
    /// memory limit and no CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ReaderResources>,
    /// Node labels a reader pod's node must have (pod `nodeSelector`), at most 32, each value a
    /// label value of at most 63 characters. Default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the reader pods tolerate (pod `tolerations`), at most 32; keys at most 317
    /// characters, values 253. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), transform = super::embedded_bounds::bound_embedded)]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity of the reader pods (pod `affinity`): at most 16 terms in all,
    /// 16 `matchExpressions` (8 `matchFields`) a term, 64 `values` an expression, 32
    /// `matchLabels`; keys at most 317 characters, values and names 253. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::embedded_bounds::bound_embedded)]
    pub affinity: Option<Affinity>,
    /// How reader pods spread over zones or nodes (pod `topologySpreadConstraints`), at most 8,
    /// each with at most 16 `matchExpressions`, 32 `matchLabels` and 16 `matchLabelKeys`; keys at
    /// most 317 characters. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), transform = super::embedded_bounds::bound_embedded)]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// PriorityClass of the reader pods, a DNS subdomain of 1-253 characters. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')")
        .message("spec.reader.priorityClassName must be a PriorityClass name (lowercase letters, digits, - and .): fix the name"))]
    pub priority_class_name: Option<String>,
    /// Extra annotations on the reader pods, at most 64, each value at most 4096 characters (e.g.
    /// for a service mesh or log shipper). `sluice.dev/` keys are the operator's. Default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('sluice.dev/'))")
        .message("spec.reader.podAnnotations has sluice.dev/ keys (the operator's, e.g. the config hash): remove them"))]
    pub pod_annotations: BTreeMap<String, String>,
    /// Extra labels on the reader pods, at most 32, each value a label value of at most 63
    /// characters. The selector labels (`app.kubernetes.io/name`, `app.kubernetes.io/instance`)
    /// and `sluice.dev/` keys are the operator's. Default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('sluice.dev/') && k != 'app.kubernetes.io/name' && k != 'app.kubernetes.io/instance')")
        .message("spec.reader.podLabels has one of app.kubernetes.io/name, app.kubernetes.io/instance or sluice.dev/ keys (they select the source's pods): remove them"))]
    pub pod_labels: BTreeMap<String, String>,
    /// Secrets to pull the reader image with (pod `imagePullSecrets`), at most 8, names at most
    /// 253 characters. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), transform = super::embedded_bounds::bound_embedded)]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Extra environment variables of the reader container, at most 64; names at most 253
    /// characters, values 32768 (32 KiB), references 253. Names starting with
    /// `SLUICE_`, `POD_NAME`, `POD_NAMESPACE` and `RUST_LOG` are the operator's; `AWS_ROLE_ARN`,
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_CONTAINER_CREDENTIALS_FULL_URI` and
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` are the EKS identity webhooks' (use
    /// `serviceAccount.annotations` or `spec.credentials`). Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), transform = super::embedded_bounds::bound_embedded)]
    #[x_kube(validation = Rule::new("self.all(e, !e.name.startsWith('SLUICE_') && !(e.name in ['POD_NAME', 'POD_NAMESPACE', 'RUST_LOG', 'AWS_ROLE_ARN', 'AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_CONTAINER_CREDENTIALS_FULL_URI', 'AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE']))")
        .message("spec.reader.env sets a variable the operator or the EKS identity webhook owns (SLUICE_*, POD_NAME, POD_NAMESPACE, RUST_LOG, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE): use spec.reader.logLevel, spec.credentials or spec.reader.serviceAccount.annotations instead"))]
    pub env: Vec<EnvVar>,
    /// ConfigMaps or Secrets whose keys become environment variables of the reader container
    /// (`envFrom`), at most 16; names and prefixes at most 253 characters. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), transform = super::embedded_bounds::bound_embedded)]
    pub env_from: Vec<EnvFromSource>,
    /// The readers' ServiceAccount: created per source (`<source>-reader`, with `annotations`
    /// such as `eks.amazonaws.com/role-arn` for IRSA), or an existing one by `name`. Default:
    /// created, without annotations.
    #[serde(default)]
    pub service_account: ReaderServiceAccount,
}
