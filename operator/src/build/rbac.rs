//! The readers' identity: a ServiceAccount, a namespaced Role and its RoleBinding.
//!
//! Why these rules and no narrower: a reader reads its `source.yaml` and the checkpoint ConfigMap,
//! creates its own lease ConfigMap `<source>-lease-<pod>`, renews it (update with a resourceVersion
//! compare-and-swap), and lists its peers' leases by label to honour their committed ids
//! (`protocol/PROTOCOL.md`). Every reader, exactlyOnce or not, also writes its sinks' health into
//! that same lease ConfigMap (key `sinkHealth`, read by `sink_health`), which is why every reader
//! pod mounts its token (`pod_shape`) and why this Role is bound for every source; the write
//! needs no rule beyond the lease's own. RBAC cannot restrict `create` or label-selected `list` by name, and lease
//! names carry the pod name, which is not known when the Role is written; so the rule is on
//! ConfigMaps of the source's namespace, and it grants no `delete` and nothing else.
//!
//! What RBAC cannot say, the ValidatingAdmissionPolicy `reader-own-lease.sluice.dev`
//! (deploy/policy/, installed with the operator) does: a reader may create, update or patch only
//! its own lease, labelled as a lease of its source and owned by that SqsSource alone, and nothing
//! else; above all not the checkpoint ConfigMap, which only the operator writes (a forged commit
//! would let readers delete undelivered messages). How the policy knows a reader: by the register
//! of reader accounts the operator writes in the namespace, the ConfigMap `sluice-readers`
//! (`reader_registry`), which names this ServiceAccount and its source; the policy reads it as its
//! parameter, so only accounts the operator registered are held, and unrelated accounts (any
//! `metrics-reader`) are not. The pod comes from the pod-bound token
//! (`userInfo.extra["authentication.kubernetes.io/pod-name"]`), so the caller's own lease is
//! `<source>-lease-<pod>` and a peer's lease is not. Labels on the ServiceAccount or the pod are
//! invisible to admission and labels on the written object are chosen by the writer, hence a
//! register (deploy/README.md, "The reader policy").
//!
//! The operator can create this Role only because it holds every permission the Role grants
//! (Kubernetes' escalation check); `tests/rbac_trace.rs` checks that too.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::child_meta;
use crate::access::ApiCall;
use crate::names;
use crate::validate::Validated;

/// What the reader's cluster layer (reader/src/cluster: leases, sink health, rate share) asks of
/// the API server.
pub const READER_API_CALLS: &[ApiCall] = &[
    ApiCall::new("", "configmaps", "get"),
    ApiCall::new("", "configmaps", "list"),
    ApiCall::new("", "configmaps", "watch"),
    ApiCall::new("", "configmaps", "create"),
    ApiCall::new("", "configmaps", "update"),
    ApiCall::new("", "configmaps", "patch"),
];

pub(super) fn service_account(valid: &Validated<'_>, owner: &OwnerReference) -> ServiceAccount {
    ServiceAccount {
        metadata: child_meta(valid, owner, names::reader_name(&valid.name)),
        ..ServiceAccount::default()
    }
}

pub(super) fn role(valid: &Validated<'_>, owner: &OwnerReference) -> Role {
    Role {
        metadata: child_meta(valid, owner, names::reader_name(&valid.name)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: ["get", "list", "watch", "create", "update", "patch"].map(str::to_owned).to_vec(),
            ..PolicyRule::default()
        }]),
    }
}

pub(super) fn role_binding(valid: &Validated<'_>, owner: &OwnerReference) -> RoleBinding {
    let name = names::reader_name(&valid.name);
    RoleBinding {
        metadata: child_meta(valid, owner, name.clone()),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name,
            namespace: Some(valid.namespace.clone()),
            api_group: None,
        }]),
    }
}
