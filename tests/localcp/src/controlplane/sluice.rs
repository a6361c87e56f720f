//! Sluice's own admission rules for the local control plane: the SqsSource validator, and the
//! reader policy of deploy/policy/ (installed as a cluster would be, then enforced by
//! [`super::admission`]).
//!
//! A cluster validates `SqsSource` objects with the CRD's schema and CEL rules; the control plane does
//! not interpret those, so it calls the same validator the reader uses for its `--source` file, and
//! refuses an invalid object with 422 and one cause per violation, as a cluster would.

use super::ControlPlane;
use super::error::Cause;

/// Validates `sluice.dev/SqsSource` objects with `sluice_crds::validate::validate_source_value`.
pub fn register_validators(cp: &ControlPlane) {
    cp.set_validator("sluice.dev", "SqsSource", |obj| {
        let mut body = obj.clone();
        // Status is written by the operator through the status subresource; the schema check is for spec.
        if let Some(m) = body.as_object_mut() {
            m.remove("status");
        }
        sluice_crds::validate::validate_source_value(&body).map(|_| ()).map_err(|e| {
            e.violations()
                .iter()
                .map(|v| Cause { field: v.path.clone(), message: v.message.clone() })
                .collect()
        })
    });
}

/// The reader policy as shipped: every document of the files `deploy/policy/kustomization.yaml`
/// lists, read from the repository (not a copy), as `kubectl apply -k deploy/policy/` sends them.
pub fn reader_policy_documents() -> anyhow::Result<Vec<serde_json::Value>> {
    use anyhow::Context as _;
    use serde::Deserialize as _;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/policy");
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let kustomization: serde_json::Value = serde_yaml::from_str(&read("kustomization.yaml")?)?;
    let mut documents = Vec::new();
    for file in kustomization["resources"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
        for doc in serde_yaml::Deserializer::from_str(&read(file)?) {
            documents.push(serde_json::Value::deserialize(doc).with_context(|| format!("parsing {file}"))?);
        }
    }
    Ok(documents)
}

/// Applies [`reader_policy_documents`] through `client` (server-side apply, as `kubectl apply`).
pub async fn install_reader_policy(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::{Api, Patch, PatchParams};
    let params = PatchParams::apply("sluice-deploy").force();
    for doc in reader_policy_documents()? {
        let name = doc.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or_default();
        match doc.get("kind").and_then(serde_json::Value::as_str) {
            Some("ValidatingAdmissionPolicy") => {
                let typed: ValidatingAdmissionPolicy = serde_json::from_value(doc.clone())?;
                Api::<ValidatingAdmissionPolicy>::all(client.clone())
                    .patch(name, &params, &Patch::Apply(&typed))
                    .await?;
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let typed: ValidatingAdmissionPolicyBinding = serde_json::from_value(doc.clone())?;
                Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                    .patch(name, &params, &Patch::Apply(&typed))
                    .await?;
            }
            other => anyhow::bail!("deploy/policy holds an unexpected kind {other:?}"),
        }
    }
    Ok(())
}
