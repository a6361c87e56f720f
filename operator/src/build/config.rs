//! The reader's configuration: the source rendered back as an `SqsSource` YAML document.
//!
//! Why the whole resource and not a private format: the reader parses it with the same function
//! that parses a standalone file (`sluice_crds::validate::parse_source_yaml`), so the cluster and
//! standalone modes cannot drift. Only name, namespace and spec are rendered: no status, no
//! managed fields, and no generation, so the hash moves only when the configuration does.
//! Credentials are references (Secret names, role ARNs), never keys.
//!
//! The pod shaping of `spec.reader` (resources, placement, pod metadata, extra environment, the
//! ServiceAccount) is left out: the reader does not use it, it is already on the pod, and an
//! extra variable's value has no business in a ConfigMap that every reader and every holder of
//! ConfigMap read access can see.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use sha2::{Digest, Sha256};
use sluice_crds::{ReaderSpec, SqsSource};

use super::child_meta;
use crate::error::{Error, Result};
use crate::names;
use crate::validate::Validated;

/// The source as the readers see it: name, namespace and spec only, and of `spec.reader` only
/// what the reader reads (image, log level, grace period).
pub fn reader_view(source: &SqsSource, name: &str, namespace: &str) -> SqsSource {
    let mut view = SqsSource::new(name, source.spec.clone());
    let reader = &source.spec.reader;
    view.spec.reader = ReaderSpec {
        image: reader.image.clone(),
        log_level: reader.log_level.clone(),
        termination_grace_period_seconds: reader.termination_grace_period_seconds,
        ..ReaderSpec::default()
    };
    // A replay is the operator's work, not the readers': requesting one must not roll them.
    view.spec.replay = None;
    view.metadata.namespace = Some(namespace.to_owned());
    view
}

/// The `source.yaml` the readers load.
pub fn render_source(valid: &Validated<'_>) -> Result<String> {
    let view = reader_view(valid.source, &valid.name, &valid.namespace);
    serde_yaml::to_string(&view).map_err(|e| Error::Render(e.to_string()))
}

/// What the pods' config hash is taken over: the reader's view without `spec.scaling`, which only
/// the operator's autoscaler reads. So changing scaling bounds or targets does not restart every
/// reader (the ConfigMap still shows them; a running reader never rereads it).
pub fn render_for_hash(valid: &Validated<'_>) -> Result<String> {
    let mut view = reader_view(valid.source, &valid.name, &valid.namespace);
    view.spec.scaling = Default::default();
    serde_yaml::to_string(&view).map_err(|e| Error::Render(e.to_string()))
}

/// First 16 hex digits of the SHA-256 of the rendered configuration.
pub fn config_hash(rendered: &str) -> String {
    Sha256::digest(rendered.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

pub(super) fn config_map(valid: &Validated<'_>, owner: &OwnerReference, rendered: String) -> ConfigMap {
    ConfigMap {
        metadata: child_meta(valid, owner, names::config_map_name(&valid.name)),
        data: Some(BTreeMap::from([(names::CONFIG_KEY.to_owned(), rendered)])),
        ..ConfigMap::default()
    }
}
