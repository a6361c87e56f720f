//! `spec.reader`'s pod shaping copied onto the reader pod: resources, placement, pod metadata,
//! pull secrets, extra environment, the ServiceAccount and whether its API token is mounted.
//!
//! Why the operator's own values win: the selector labels, the config-hash annotation and the
//! variables the reader is started with are how the operator finds and restarts its pods and
//! how the reader finds its source; the CRD refuses user values for them, and this code applies
//! the user's first and the operator's last in case an old object slipped past the schema.
//!
//! Why every reader gets the API token: each reports its sinks' health in its own lease ConfigMap
//! (the `SinksHealthy` condition), and under exactlyOnce or a shared rate limit it also
//! coordinates through the API. What that token may write is bounded by the readers' ClusterRole
//! (bound in the source's namespace only) and by the admission policy
//! `reader-own-lease.sluice.dev` (deploy/policy): its own lease and nothing else. IRSA and EKS Pod Identity mount their own projected tokens (audience
//! `sts.amazonaws.com` / `pods.eks.amazonaws.com`), unaffected by this setting.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_crds::{ReaderSpec, ResourceAmounts};

use super::service_account::account_name;
use crate::validate::Validated;

/// Requests sized from measured runs of the release build (BENCHMARKS.md, footprint and release
/// profile): a reader with four pollers sits at 19 MiB resident idle and peaks at 24 MiB draining
/// a backlog of 1 KiB messages at about 800 messages/s, using about 0.15 CPU-seconds per 1,000
/// messages. 48Mi is twice that peak: room for larger messages in work and a streamed object's
/// part window, without a request that packs nodes too tightly. A source that moves more per pod
/// (large Extended Client payloads are held whole, up to `payload.maxBytesInFlight`) sets
/// `spec.reader.resources`.
const DEFAULT_CPU_REQUEST: &str = "100m";
const DEFAULT_MEMORY_REQUEST: &str = "48Mi";
/// Room for a reader holding messages of SQS's largest size (1 MiB since 2025) before the kernel
/// stops one that leaks. What a reader holds is bounded by `held.maxBytes` (64 MiB by default)
/// plus one receive batch per poller above it (10 messages of up to 1 MiB each), and each body is
/// copied again on its way to a sink (a request body, an s3 line, a log line): a debug build
/// draining a backlog of 100-120 MiB of 1 MiB messages into an http, an sqs, an s3 and a log sink
/// at once peaked at 264-321 MiB resident (tests/tests/e2e_large_messages.rs, runs differ with
/// timing), over the 256Mi that sufficed for 256 KiB messages. 512Mi leaves about 1.6 times the
/// highest of those peaks.
const DEFAULT_MEMORY_LIMIT: &str = "512Mi";

/// Variables the EKS pod identity webhook reads or injects (amazon-eks-pod-identity-webhook,
/// `addEnvToContainer` in pkg/handler/handler.go): it skips a container that already has
/// `AWS_ROLE_ARN` or `AWS_WEB_IDENTITY_TOKEN_FILE` (IRSA) or the two container-credential
/// variables (Pod Identity), so the operator sets none of them on a reader.
pub const EKS_WEBHOOK_VARIABLES: &[&str] = &[
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_STS_REGIONAL_ENDPOINTS",
];

/// Applies the pod-level settings of `spec.reader` to the reader pod.
pub(super) fn shape_pod(valid: &Validated<'_>, pod: &mut PodSpec, meta: &mut ObjectMeta) {
    let reader = &valid.source.spec.reader;
    pod.service_account_name = Some(account_name(valid));
    pod.automount_service_account_token = Some(true);
    pod.node_selector = non_empty_map(&reader.node_selector);
    pod.tolerations = non_empty(&reader.tolerations);
    pod.affinity.clone_from(&reader.affinity);
    pod.topology_spread_constraints = non_empty(&reader.topology_spread_constraints);
    pod.priority_class_name.clone_from(&reader.priority_class_name);
    pod.image_pull_secrets = non_empty(&reader.image_pull_secrets);
    meta.labels = Some(under(&reader.pod_labels, meta.labels.take()));
    meta.annotations = Some(under(&reader.pod_annotations, meta.annotations.take()));
}

/// Applies the container-level settings of `spec.reader`: resources, then the user's variables
/// after the operator's (so a reference such as `$(POD_NAME)` in a user value resolves).
pub(super) fn shape_container(reader: &ReaderSpec, container: &mut Container) {
    container.resources = Some(resources(reader));
    let mut env = container.env.take().unwrap_or_default();
    let own: Vec<String> = env.iter().map(|e| e.name.clone()).collect();
    env.extend(reader.env.iter().filter(|e| !own.contains(&e.name)).cloned());
    container.env = Some(env);
    container.env_from = non_empty(&reader.env_from);
}

/// The user's requests and limits, each amount left unset falling back to the default.
pub fn resources(reader: &ReaderSpec) -> ResourceRequirements {
    let spec = reader.resources.clone().unwrap_or_default();
    let requests = spec.requests.unwrap_or_default();
    let limits = spec.limits.unwrap_or_default();
    ResourceRequirements {
        requests: Some(amounts(&requests, Some(DEFAULT_CPU_REQUEST), Some(DEFAULT_MEMORY_REQUEST))),
        limits: Some(amounts(&limits, None, Some(DEFAULT_MEMORY_LIMIT))),
        ..ResourceRequirements::default()
    }
}

fn amounts(
    given: &ResourceAmounts,
    default_cpu: Option<&str>,
    default_memory: Option<&str>,
) -> BTreeMap<String, Quantity> {
    [
        ("cpu", given.cpu.as_deref().or(default_cpu)),
        ("memory", given.memory.as_deref().or(default_memory)),
        ("ephemeral-storage", given.ephemeral_storage.as_deref()),
    ]
    .into_iter()
    .filter_map(|(name, amount)| amount.map(|a| (name.to_owned(), Quantity(a.to_owned()))))
    .collect()
}

/// `ours` laid over `theirs`: the operator's keys win.
fn under(
    theirs: &BTreeMap<String, String>,
    ours: Option<BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut merged = theirs.clone();
    merged.extend(ours.unwrap_or_default());
    merged
}

fn non_empty<T: Clone>(items: &[T]) -> Option<Vec<T>> {
    (!items.is_empty()).then(|| items.to_vec())
}

fn non_empty_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}
