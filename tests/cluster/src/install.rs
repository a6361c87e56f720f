//! What a user installs, applied as they apply it: the files under deploy/ read from the repository
//! (never copies), sent with server-side apply (`kubectl apply --server-side`) by the cluster's
//! administrator. The CRD is deploy/crds/sqssource.yaml, the reader policy deploy/policy/, the
//! operator's RBAC deploy/operator/ (ServiceAccount, ClusterRole and its binding, the leader-election
//! Role), with the namespace set the way kustomize's `namespace:` sets it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde::Deserialize as _;

/// Field manager of what the harness installs (the user's `kubectl apply`).
pub const MANAGER: &str = "sluice-install";

/// The repository's deploy/ directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of a YAML file under deploy/.
pub fn documents(relative: &str) -> Result<Vec<serde_json::Value>> {
    let path = deploy_dir().join(relative);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value =
            serde_json::Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Server-side applies `doc` (any kind the server serves), in `namespace` if the kind is namespaced.
pub async fn apply(client: &kube::Client, doc: &serde_json::Value, namespace: Option<&str>) -> Result<()> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("the server does not serve {api_version} {kind}"))?;
    let mut object: DynamicObject = serde_json::from_value(doc.clone())?;
    let name = object.metadata.name.clone().context("a document without metadata.name")?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = namespace
                .map(str::to_owned)
                .or_else(|| object.metadata.namespace.clone())
                .unwrap_or_else(|| "default".to_owned());
            object.metadata.namespace = Some(ns.clone());
            Api::namespaced_with(client.clone(), &ns, &resource)
        }
    };
    api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&object))
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}

/// Applies deploy/crds/sqssource.yaml and waits until the API server serves it (`Established`).
pub async fn crd(client: &kube::Client) -> Result<()> {
    for doc in documents("crds/sqssource.yaml")? {
        apply(client, &doc, None).await?;
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let established = kube::runtime::wait::await_condition(
            api,
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .with_context(|| format!("CRD {name} not established within 30 s"))??;
    }
    Ok(())
}

/// Applies the reader policy as `kubectl apply -k deploy/policy/` would (the files its
/// kustomization lists).
pub async fn reader_policy(client: &kube::Client) -> Result<()> {
    for doc in kustomization_documents("policy")? {
        apply(client, &doc, None).await?;
    }
    Ok(())
}

/// The documents a kustomization directory under deploy/ lists in `resources` (files only).
pub fn kustomization_documents(dir: &str) -> Result<Vec<serde_json::Value>> {
    let kustomization = documents(&format!("{dir}/kustomization.yaml"))?;
    let mut out = Vec::new();
    for file in kustomization.iter().flat_map(|k| k["resources"].as_array().cloned().unwrap_or_default()) {
        let Some(file) = file.as_str() else { continue };
        if file.ends_with(".yaml") {
            out.extend(documents(&format!("{dir}/{file}"))?);
        }
    }
    Ok(out)
}

/// The operator's identity and permissions for an operator serving `namespace`: the shipped
/// ServiceAccount, ClusterRole, ClusterRoleBinding, the readers' ClusterRole (one for every
/// operator) and leader-election Role and RoleBinding, with their namespace (and the subjects')
/// set to `namespace`. The ClusterRoleBinding is named after the namespace too, so that operators
/// of several namespaces (one per suite) coexist.
pub async fn operator_rbac(client: &kube::Client, namespace: &str) -> Result<()> {
    let mut docs = Vec::new();
    let files = [
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "reader-clusterrole.yaml",
        "leader-election.yaml",
    ];
    for file in files {
        docs.extend(documents(&format!("operator/{file}"))?);
    }
    for mut doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Namespace" {
            continue;
        }
        if let Some(subjects) = doc.get_mut("subjects").and_then(serde_json::Value::as_array_mut) {
            for subject in subjects {
                subject["namespace"] = namespace.into();
            }
        }
        if kind == "ClusterRoleBinding" {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            doc["metadata"]["name"] = format!("{name}-{namespace}").into();
        }
        if doc["metadata"].get("namespace").is_some() || kind == "ServiceAccount" {
            doc["metadata"]["namespace"] = namespace.into();
        }
        apply(client, &doc, Some(namespace)).await?;
    }
    Ok(())
}

/// Creates the ServiceAccount `account` in `namespace` and binds it to the shipped readers'
/// ClusterRole there, as the operator binds a source's readers (a RoleBinding
/// `<account>-sluice-reader`); with [`account_kubeconfig`], how a reader runs outside a pod with
/// exactly the readers' RBAC. Not registered for the reader policy (deploy/policy/), so only RBAC
/// holds it.
pub async fn bind_reader_account(client: &kube::Client, namespace: &str, account: &str) -> Result<()> {
    let role = documents("operator/reader-clusterrole.yaml")?;
    let Some(role) = role.first().and_then(|d| d["metadata"]["name"].as_str()) else {
        bail!("deploy/operator/reader-clusterrole.yaml names no ClusterRole");
    };
    let docs = [
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{account}-{role}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}),
    ];
    for doc in docs {
        apply(client, &doc, Some(namespace)).await?;
    }
    Ok(())
}

/// Requests a token of `account` in `namespace` (as a kubelet mounts one, not bound to a pod) and
/// writes a kubeconfig for `url` at `path` that reads it (from `path` with the extension `token`):
/// how the operator (`operator_service_account`) or a reader (`bind_reader_account`) runs outside
/// a pod with exactly the shipped RBAC.
pub async fn account_kubeconfig(
    client: &kube::Client,
    url: &str,
    ca: &Path,
    namespace: &str,
    account: &str,
    path: &Path,
) -> Result<()> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(6 * 3600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let issued = api.create_token_request(account, &kube::api::PostParams::default(), &request).await?;
    let token = issued.status.map(|s| s.token).unwrap_or_default();
    let token_file = path.with_extension("token");
    std::fs::write(&token_file, token)?;
    let text =
        crate::kubeconfig::render(url, ca, crate::kubeconfig::Credentials::TokenFile(&token_file), namespace);
    crate::kubeconfig::write(path, &text)?;
    Ok(())
}

/// The shipped ServiceAccount's name (what the operator runs as).
pub fn operator_service_account() -> Result<String> {
    let docs = documents("operator/serviceaccount.yaml")?;
    match docs.first().and_then(|d| d["metadata"]["name"].as_str()) {
        Some(name) => Ok(name.to_owned()),
        None => bail!("deploy/operator/serviceaccount.yaml names no ServiceAccount"),
    }
}
