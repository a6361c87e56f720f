//! The reader Deployment.
//!
//! Why these choices:
//! - `spec.replicas` is never set here: the autoscaler owns it under its own field manager, and a
//!   value in our apply would fight it on every reconcile. Only the apply that creates the
//!   Deployment names it (build/starting_replicas.rs), else a new source would start one reader
//!   whatever its `minReplicas`.
//! - The config hash on the pod template is what rolls the pods when `source.yaml` changes; a
//!   mounted ConfigMap alone would be refreshed in place, unnoticed by a running reader.
//! - AWS keys reach the pod only through `secretKeyRef`, so they never pass through the operator.
//! - No variable the EKS pod identity webhook reads or sets (`AWS_ROLE_ARN`,
//!   `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_CONTAINER_CREDENTIALS_FULL_URI`,
//!   `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, `AWS_REGION`, `AWS_DEFAULT_REGION`,
//!   `AWS_STS_REGIONAL_ENDPOINTS`) is set here: the webhook skips a container that already has
//!   `AWS_ROLE_ARN`, which would leave IRSA without its token. A role to assume on top of the
//!   pod's identity reaches the reader in `source.yaml` (`spec.credentials.roleArn`).
//! - The pod runs non-root with a read-only root filesystem, no capabilities and no privilege
//!   escalation: a reader needs only the network and its mounted configuration.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile,
    SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_crds::{CredentialSource, Credentials};

use super::pod_shape::{shape_container, shape_pod};
use super::{child_meta, shutdown_plan, sink_secrets};
use crate::names;
use crate::validate::Validated;

const CONFIG_VOLUME: &str = "config";
const DEFAULT_LOG_LEVEL: &str = "info";
/// Non-root uid of the image (distroless "nonroot").
const RUN_AS_USER: i64 = 65_532;

pub(super) fn deployment(valid: &Validated<'_>, owner: &OwnerReference, hash: &str) -> Deployment {
    let name = names::reader_name(&valid.name);
    let plan = shutdown_plan(&valid.source.spec);
    let mut pod_meta = ObjectMeta {
        labels: Some(names::labels(&valid.name)),
        annotations: Some(BTreeMap::from([(names::CONFIG_HASH_ANNOTATION.to_owned(), hash.to_owned())])),
        ..ObjectMeta::default()
    };
    let mut pod = PodSpec {
        termination_grace_period_seconds: Some(plan.grace_period_seconds),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            run_as_group: Some(RUN_AS_USER),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        containers: vec![container(valid, plan.reader_deadline_seconds)],
        volumes: Some(vec![Volume {
            name: CONFIG_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: names::config_map_name(&valid.name),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }]),
        ..PodSpec::default()
    };
    shape_pod(valid, &mut pod, &mut pod_meta);
    if let Some(account_hash) = super::service_account::annotations_hash(valid) {
        let annotations = pod_meta.annotations.get_or_insert_default();
        annotations.insert(names::SERVICE_ACCOUNT_HASH_ANNOTATION.to_owned(), account_hash);
    }
    if let Some((volume, mount, variable)) = sink_secrets::mount(&valid.source.spec) {
        pod.volumes.get_or_insert_default().push(volume);
        for container in &mut pod.containers {
            container.volume_mounts.get_or_insert_default().push(mount.clone());
            container.env.get_or_insert_default().push(variable.clone());
        }
    }
    Deployment {
        metadata: child_meta(valid, owner, name),
        spec: Some(DeploymentSpec {
            replicas: None,
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(&valid.name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec { metadata: Some(pod_meta), spec: Some(pod) },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

fn container(valid: &Validated<'_>, deadline_seconds: i64) -> Container {
    let mut container = base_container(valid, deadline_seconds);
    shape_container(&valid.source.spec.reader, &mut container);
    container
}

fn base_container(valid: &Validated<'_>, deadline_seconds: i64) -> Container {
    let source_path = format!("{}/{}", names::CONFIG_MOUNT_DIR, names::CONFIG_KEY);
    let admin_addr = format!("[::]:{}", names::READER_ADMIN_PORT);
    let unready_after = valid.source.spec.delivery.unready_after_seconds.to_string();
    Container {
        name: names::READER_CONTAINER.to_owned(),
        image: Some(valid.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![names::READER_COMMAND.to_owned()]),
        args: Some(
            [
                "--source",
                &source_path,
                "--coordination",
                "kubernetes",
                "--admin-addr",
                &admin_addr,
                "--shutdown-deadline-seconds",
                &deadline_seconds.to_string(),
                "--unready-after-seconds",
                &unready_after,
                "--log-format",
                "json",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        env: Some(env(valid)),
        ports: Some(vec![ContainerPort {
            name: Some("admin".to_owned()),
            container_port: names::READER_ADMIN_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe("/healthz", LIVENESS_PERIOD_SECONDS)),
        readiness_probe: Some(probe("/readyz", READINESS_PERIOD_SECONDS)),
        volume_mounts: Some(vec![VolumeMount {
            name: CONFIG_VOLUME.to_owned(),
            mount_path: names::CONFIG_MOUNT_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// How often the kubelet asks `/readyz`. A kubelet probes first as the container starts, before the
/// reader has bound its admin port, and then once a period: the period is how long a new reader
/// waits to be counted Ready, which every step of a rolling update waits for (25% surge, gated on
/// readiness). A loopback GET every 2 s costs the reader next to nothing; the failure threshold of 3 still needs 6 s of refusals to unready.
const READINESS_PERIOD_SECONDS: i32 = 2;
/// A hung reader is restarted after three failed `/healthz` probes, 30 s.
const LIVENESS_PERIOD_SECONDS: i32 = 10;

fn probe(path: &str, period_seconds: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("admin".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

fn value(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.to_owned()), value_from: None }
}

fn field_ref(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn secret_ref(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn env(valid: &Validated<'_>) -> Vec<EnvVar> {
    let spec = &valid.source.spec;
    let mut env = vec![
        field_ref("POD_NAME", "metadata.name"),
        field_ref("POD_NAMESPACE", "metadata.namespace"),
        value("SLUICE_SOURCE", &valid.name),
        // The readers make the SqsSource the owner of their lease ConfigMaps, so deleting the source
        // removes them (the readers create them, so they cannot be among the operator's children).
        value("SLUICE_SOURCE_UID", valid.source.metadata.uid.as_deref().unwrap_or_default()),
        value("RUST_LOG", spec.reader.log_level.as_deref().unwrap_or(DEFAULT_LOG_LEVEL)),
    ];
    env.extend(credential_env(&spec.credentials));
    env
}

/// Environment that points the AWS default chain at static keys from a Secret. The other modes
/// need none: the default chain finds IRSA or Pod Identity by itself, and the reader assumes
/// `roleArn` from its `source.yaml`.
fn credential_env(credentials: &Credentials) -> Vec<EnvVar> {
    match (credentials.source, &credentials.secret_ref) {
        (CredentialSource::Secret, Some(secret)) => {
            let token = match &secret.session_token_key {
                Some(key) => secret_ref("AWS_SESSION_TOKEN", &secret.name, key, false),
                None => secret_ref("AWS_SESSION_TOKEN", &secret.name, "AWS_SESSION_TOKEN", true),
            };
            vec![
                secret_ref("AWS_ACCESS_KEY_ID", &secret.name, &secret.access_key_id_key, false),
                secret_ref("AWS_SECRET_ACCESS_KEY", &secret.name, &secret.secret_access_key_key, false),
                token,
            ]
        }
        _ => Vec::new(),
    }
}
