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
//! Why one field manager per source: each source owns its own key under server-side apply, so
//! sources of one namespace never overwrite each other's entries, an account rename drops the old
//! key, and [`release`] (applied when the source is deleted) removes the source's key without
//! touching the others'. The object carries no owner: it outlives any one source.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::service_account::account_name;
use crate::names::{FIELD_MANAGER, READER_REGISTRY};
use crate::validate::Validated;

/// The field manager under which a source applies its entry.
pub fn field_manager(source: &str) -> String {
    format!("{FIELD_MANAGER}/{source}")
}

/// A source's entry, to apply under its own field manager.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub config_map: ConfigMap,
    pub field_manager: String,
}

/// The source's entry: its readers' account, when the operator creates that account.
pub fn entry(valid: &Validated<'_>) -> Entry {
    let account = &valid.source.spec.reader.service_account;
    let data = account.create.then(|| BTreeMap::from([(account_name(valid), valid.name.clone())]));
    Entry {
        config_map: ConfigMap { data, ..release(&valid.namespace) },
        field_manager: field_manager(&valid.name),
    }
}

/// The configuration that withdraws a source's entry: applied under the source's field manager,
/// it owns nothing, so server-side apply removes what the source had applied.
pub fn release(namespace: &str) -> ConfigMap {
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
        assert_eq!(e.field_manager, "sluice-operator/orders");
        assert_eq!(e.config_map.metadata.name.as_deref(), Some("sluice-readers"));
        assert_eq!(e.config_map.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.config_map.metadata.owner_references, None, "the register outlives any one source");
        let data = e.config_map.data.unwrap_or_default();
        assert_eq!(data, BTreeMap::from([("orders-reader".to_owned(), "orders".to_owned())]));
    }

    #[test]
    fn an_existing_account_is_not_registered_and_release_owns_nothing() {
        let e = entry_of(include_str!("../../../deploy/examples/eks/payments-fifo-forward.yaml"));
        assert_eq!(e.config_map.data, None, "an account the operator did not create may be shared");
        let r = release("shop");
        assert_eq!(
            (r.data, r.metadata.labels, r.metadata.name.as_deref()),
            (None, None, Some("sluice-readers"))
        );
    }
}
