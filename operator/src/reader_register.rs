//! Writes a source's entry in its namespace's register of reader accounts, and withdraws it when
//! the source is deleted (what the register is and why it is written by merge patches:
//! build/reader_registry.rs).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::access::ApiCall;
use crate::build::reader_registry::{self, Entry, stale_keys};
use crate::error::Result;
use crate::names::{FIELD_MANAGER, READER_REGISTRY};
use crate::own_writes::{OwnWrites, content_hash};

/// A merge patch of the register's keys, its creation in a namespace that has none, and the read
/// that finds a deleted source's keys.
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("", "configmaps", "get"),
    ApiCall::new("", "configmaps", "patch"),
    ApiCall::new("", "configmaps", "create"),
];

/// Writes `entry` unless it is as this process last wrote it (see `own_writes`): its key by a
/// merge patch, the register created if the namespace has none. A source that registers no
/// account (its readers use an account it did not create) withdraws any key it had.
pub async fn register(client: &Client, entry: &Entry, own: &OwnWrites) -> Result<()> {
    let hash = content_hash(&entry.config_map);
    if own.unchanged(&entry.config_map, &entry.ledger_key, hash) {
        return Ok(());
    }
    let namespace = entry.config_map.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let mark = own.mark();
    let answer = match &entry.config_map.data {
        Some(data) => Some(set_or_create(&api, &entry.config_map, json!({ "data": data })).await?),
        None => withdraw_keys(&api, &entry.source).await?,
    };
    if let Some(answer) = answer {
        own.applied(&answer, &entry.ledger_key, hash, mark);
    }
    Ok(())
}

/// Withdraws a deleted source's keys from its namespace's register. The entry goes from `own`
/// too: the register is not watched, so a source created again under the same name would
/// otherwise find its entry "as last written" and skip it.
pub async fn withdraw(client: &Client, namespace: &str, source: &str, own: &OwnWrites) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    withdraw_keys(&api, source).await?;
    own.withdrawn(&reader_registry::empty(namespace), &reader_registry::ledger_key(source));
    Ok(())
}

/// Sets the register's keys that name `source` to null; answers the register as it then is
/// (`None`: the namespace has none).
async fn withdraw_keys(api: &Api<ConfigMap>, source: &str) -> Result<Option<ConfigMap>> {
    let Some(register) = api.get_opt(READER_REGISTRY).await? else { return Ok(None) };
    let stale = stale_keys(&register, source);
    if stale.is_empty() {
        return Ok(Some(register));
    }
    let nulls: Map<String, Value> = stale.into_iter().map(|key| (key.to_owned(), Value::Null)).collect();
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    Ok(Some(api.patch(READER_REGISTRY, &params, &Patch::Merge(json!({ "data": nulls }))).await?))
}

/// Merge-patches `patch` into the register, creating it as `register` when the namespace has
/// none (and patching after all if another reconcile created it first).
async fn set_or_create(api: &Api<ConfigMap>, register: &ConfigMap, patch: Value) -> Result<ConfigMap> {
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    match api.patch(READER_REGISTRY, &params, &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let post = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
            match api.create(&post, register).await {
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Ok(api.patch(READER_REGISTRY, &params, &Patch::Merge(&patch)).await?)
                }
                other => Ok(other?),
            }
        }
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::time::Duration;

    use http::{Method, Request, Response, StatusCode};
    use kube::client::Body;

    use super::*;
    use crate::scripted_api::answer;

    const PATH: &str = "/api/v1/namespaces/shop/configmaps/sluice-readers";

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason})
    }

    fn entry() -> Entry {
        let data = [("orders-reader".to_owned(), "orders".to_owned())].into();
        Entry {
            config_map: ConfigMap { data: Some(data), ..reader_registry::empty("shop") },
            source: "orders".into(),
            ledger_key: reader_registry::ledger_key("orders"),
        }
    }

    #[tokio::test]
    async fn a_namespace_without_a_register_gets_one_and_a_register_made_meanwhile_is_patched() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "shop");
        let own = OwnWrites::default();
        let server = tokio::spawn(async move {
            let mut handle = pin!(handle);
            let register = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "sluice-readers", "namespace": "shop", "resourceVersion": "3"},
                "data": {"orders-reader": "orders"}});
            let mut seen = vec![answer(&mut handle, StatusCode::NOT_FOUND, status(404, "NotFound")).await];
            seen.push(answer(&mut handle, StatusCode::CONFLICT, status(409, "AlreadyExists")).await);
            seen.push(answer(&mut handle, StatusCode::OK, register).await);
            seen
        });
        let entry_to_write = entry();
        let written = register(&client, &entry_to_write, &own);
        tokio::time::timeout(Duration::from_secs(5), written)
            .await
            .expect("no unexpected request")
            .expect("written");
        let seen = server.await.expect("server");
        let requests: Vec<(&Method, &str)> = seen.iter().map(|(m, p, _)| (m, p.as_str())).collect();
        let collection = "/api/v1/namespaces/shop/configmaps";
        assert_eq!(requests, [(&Method::PATCH, PATH), (&Method::POST, collection), (&Method::PATCH, PATH)]);
        assert_eq!(seen[0].2, json!({"data": {"orders-reader": "orders"}}), "the source's key alone");
        assert_eq!(seen[1].2["metadata"]["name"], "sluice-readers");
        assert_eq!(seen[1].2["data"], json!({"orders-reader": "orders"}));
        let entry = entry();
        assert!(own.unchanged(&entry.config_map, &entry.ledger_key, content_hash(&entry.config_map)));
    }

    #[tokio::test]
    async fn a_source_that_registers_no_account_withdraws_its_keys_and_nothing_else() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "shop");
        let server = tokio::spawn(async move {
            let mut handle = pin!(handle);
            let register = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "sluice-readers", "namespace": "shop", "resourceVersion": "3"},
                "data": {"orders-reader": "orders", "payments-reader": "payments"}});
            let read = answer(&mut handle, StatusCode::OK, register.clone()).await;
            let patched = answer(&mut handle, StatusCode::OK, register).await;
            (read, patched)
        });
        let unregistered = Entry { config_map: reader_registry::empty("shop"), ..entry() };
        let own = OwnWrites::default();
        let written = register(&client, &unregistered, &own);
        tokio::time::timeout(Duration::from_secs(5), written)
            .await
            .expect("no unexpected request")
            .expect("written");
        let (read, patched) = server.await.expect("server");
        assert_eq!((&read.0, read.1.as_str()), (&Method::GET, PATH));
        assert_eq!(
            (&patched.0, patched.2.clone()),
            (&Method::PATCH, json!({"data": {"orders-reader": null}}))
        );
    }
}
