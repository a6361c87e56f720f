//! Secret keys the HTTP sinks reference (header tokens, CA bundles), mounted as files.
//!
//! Why files and not environment variables: the kubelet updates a mounted Secret in place when
//! it is rotated, so the reader can pick up a new token without a restart, while an environment
//! variable is fixed for the life of the container. Why the operator never reads them: it only
//! renders the reference; the kubelet resolves it with the pod's own access, so the operator
//! needs no permission on Secrets and no secret value passes through it or its ConfigMaps.
//!
//! Contract with the reader: each key is the file `<SLUICE_SECRETS_DIR>/<secret>/<key>`, and
//! `SLUICE_SECRETS_DIR` is set on the container whenever a sink references a Secret.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    EnvVar, KeyToPath, ProjectedVolumeSource, SecretProjection, Volume, VolumeMount, VolumeProjection,
};
use sluice_crds::SqsSourceSpec;

/// Where the referenced keys are mounted, and the variable that tells the reader.
pub const SECRETS_DIR: &str = "/var/run/sluice/secrets";
pub const SECRETS_DIR_VARIABLE: &str = "SLUICE_SECRETS_DIR";
const VOLUME: &str = "sink-secrets";

/// Every (Secret, key) the source's HTTP sinks (dead-letter sink included) reference.
pub fn referenced_keys(spec: &SqsSourceSpec) -> BTreeMap<String, BTreeSet<String>> {
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let refs =
        spec.sinks.iter().chain(&spec.dead_letter_sink).filter_map(|s| s.http.as_ref()?.secret_refs.as_ref());
    for secrets in refs {
        let headers = secrets.headers.iter().map(|h| &h.secret_key_ref);
        for key_ref in headers.chain(&secrets.ca_bundle) {
            keys.entry(key_ref.name.clone()).or_default().insert(key_ref.key.clone());
        }
    }
    keys
}

/// The volume, its mount and the variable; `None` when no sink references a Secret.
pub(super) fn mount(spec: &SqsSourceSpec) -> Option<(Volume, VolumeMount, EnvVar)> {
    let keys = referenced_keys(spec);
    if keys.is_empty() {
        return None;
    }
    let sources = keys
        .into_iter()
        .map(|(secret, keys)| VolumeProjection {
            secret: Some(SecretProjection {
                items: Some(
                    keys.into_iter()
                        .map(|key| KeyToPath { path: format!("{secret}/{key}"), key, mode: None })
                        .collect(),
                ),
                name: secret,
                optional: Some(false),
            }),
            ..VolumeProjection::default()
        })
        .collect();
    let volume = Volume {
        name: VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource { sources: Some(sources), default_mode: None }),
        ..Volume::default()
    };
    let mount = VolumeMount {
        name: VOLUME.to_owned(),
        mount_path: SECRETS_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let variable = EnvVar {
        name: SECRETS_DIR_VARIABLE.to_owned(),
        value: Some(SECRETS_DIR.to_owned()),
        value_from: None,
    };
    Some((volume, mount, variable))
}
