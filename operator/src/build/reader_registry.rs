//! The namespace's register of reader identities: the ConfigMap `sluice-readers`, the parameter of
//! the admission policy `reader-own-lease.sluice.dev` (deploy/policy/).
//!
//! Why a register: the policy must hold Sluice's readers, and only them, to their own lease. A
//! ServiceAccount name pattern cannot say that (any `metrics-reader` matched `*-reader`), and labels
//! on the account or the pod are invisible to admission. So the operator writes down, in each
//! namespace it serves, which accounts are readers and of which source: data key = ServiceAccount
//! name, value = source name. The policy's binding reads the register of the request's namespace
//! (`paramRef`, `parameterNotFoundAction: Allow`), so a namespace without sources has none and is
//! untouched, and an account not in it is not a reader. A reader cannot edit the register: the
//! policy lets a registered reader write only its own lease.
//!
//! Only accounts the operator creates are registered: an existing account named by
//! `spec.reader.serviceAccount` (create: false) may be shared with applications, which the reader
//! rules would break; such readers are bounded by RBAC alone (deploy/README.md).
//!
//! Why each source writes its own key with a JSON merge patch (`{"data": {account: source}}`), and
//! not a server-side apply: sources of one namespace never overwrite each other's entries either
//! way, but an apply needs a field manager per source to own its key, and the API server's cost
//! of a write grows with the number of managers on the object. With a thousand sources in one
//! namespace each apply cost the API server about 50 ms of CPU (a 430 KB object, most of it
//! `managedFields`); a merge patch costs about 10 ms (a 40 KB object, one manager). A deleted
//! source's keys are found by their value and removed the same way ([`stale_keys`]). A key left by
//! a renamed account stays until the source is deleted: it holds an account the operator no longer
//! uses (and still owns) to its own lease, which grants nothing. The object carries no owner: it
//! outlives any one source.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::service_account::account_name;
use crate::names::{FIELD_MANAGER, READER_REGISTRY};
use crate::validate::Validated;

/// What the operator's record of its own writes (`own_writes`) keeps a source's entry under: one
/// record per source, though all write as the operator.
pub fn ledger_key(source: &str) -> String {
    format!("{FIELD_MANAGER}/{source}")
}

/// A source's entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The register with the source's key alone (`data` is `None` when the source registers no
    /// account).
    pub config_map: ConfigMap,
    /// The source's name (the value of its key).
    pub source: String,
    /// See [`ledger_key`].
    pub ledger_key: String,
}

/// The source's entry: its readers' account, when the operator creates that account.
pub fn entry(valid: &Validated<'_>) -> Entry {
    let account = &valid.source.spec.reader.service_account;
    let data = account.create.then(|| BTreeMap::from([(account_name(valid), valid.name.clone())]));
    Entry {
        config_map: ConfigMap { data, ..empty(&valid.namespace) },
        source: valid.name.clone(),
        ledger_key: ledger_key(&valid.name),
    }
}

/// The keys of `register` that name `source`: what a merge patch sets to null to withdraw them.
pub fn stale_keys<'a>(register: &'a ConfigMap, source: &str) -> Vec<&'a str> {
    let data = register.data.iter().flatten();
    data.filter(|(_, value)| value.as_str() == source).map(|(key, _)| key.as_str()).collect()
}

/// The register of `namespace` with no data.
pub fn empty(namespace: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(READER_REGISTRY.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::validate::validate;

    fn entry_of(yaml: &str) -> Entry {
        let source = fixtures::source(yaml);
        match validate(&source, Some("ghcr.io/sluice/sluice:0.1.0")) {
            Ok(valid) => entry(&valid),
            Err(problems) => panic!("fixture invalid: {problems:?}"),
        }
    }

    #[test]
    fn a_source_registers_the_account_the_operator_creates_for_it() {
        let e = entry_of(fixtures::BASIC);
        assert_eq!(e.ledger_key, "sluice-operator/orders");
        assert_eq!(e.config_map.metadata.name.as_deref(), Some("sluice-readers"));
        assert_eq!(e.config_map.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.config_map.metadata.owner_references, None, "the register outlives any one source");
        let data = e.config_map.data.unwrap_or_default();
        assert_eq!(data, BTreeMap::from([("orders-reader".to_owned(), "orders".to_owned())]));
    }

    #[test]
    fn an_existing_account_is_not_registered() {
        let e = entry_of(include_str!("../../../deploy/examples/eks/payments-fifo-forward.yaml"));
        assert_eq!(e.config_map.data, None, "an account the operator did not create may be shared");
        let r = empty("shop");
        assert_eq!(
            (r.data, r.metadata.labels, r.metadata.name.as_deref()),
            (None, None, Some("sluice-readers"))
        );
    }

    #[test]
    fn a_source_s_keys_are_those_naming_it() {
        let register = ConfigMap {
            data: Some(BTreeMap::from([
                ("orders-reader".to_owned(), "orders".to_owned()),
                ("orders-old".to_owned(), "orders".to_owned()),
                ("payments-reader".to_owned(), "payments".to_owned()),
            ])),
            ..empty("shop")
        };
        assert_eq!(stale_keys(&register, "orders"), ["orders-old", "orders-reader"]);
        assert!(stale_keys(&register, "billing").is_empty());
        assert!(stale_keys(&empty("shop"), "orders").is_empty());
    }
}
