//! The readers' identity: a ServiceAccount, and a RoleBinding of the shared ClusterRole
//! `sluice-reader` to it in the source's namespace.
//!
//! Why these rules and no narrower: a reader reads its `source.yaml` and the checkpoint ConfigMap,
//! creates its own lease ConfigMap `<source>-lease-<pod>`, renews it (update with a resourceVersion
//! compare-and-swap), and lists its peers' leases by label to honour their committed ids
//! (`protocol/PROTOCOL.md`). Every reader, exactlyOnce or not, also writes its sinks' health into
//! that same lease ConfigMap (key `sinkHealth`, read by `sink_health`), which is why every reader
//! pod mounts its token (`pod_shape`) and why every source's readers are bound; the write needs no
//! rule beyond the lease's own. RBAC cannot restrict `create` or label-selected `list` by name,
//! and lease names carry the pod name, which is not known in advance; so the rule is on ConfigMaps
//! of the namespace the binding is in, and it grants no `delete` and nothing else.
//!
//! Why one ClusterRole for every source and not a Role each: the rule is the same for every
//! source (nothing in it names one), and a RoleBinding to a ClusterRole the operator may `bind` by
//! name is authorized by that one permission, while a Role the operator writes, and a binding to
//! it, are each checked against everything the operator holds, which the API server finds by
//! listing every RoleBinding of the namespace: a quarter of a second a write with a thousand
//! sources in one namespace (BENCHMARKS.md, "Results: one ClusterRole for every source's
//! readers"). `bind` on that one ClusterRole grants the operator nothing else, where `escalate`
//! would let it grant anything.
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
//! `tests/rbac_trace.rs` checks that the shipped ClusterRole grants exactly `READER_API_CALLS`
//! and that the operator may bind it and no other role.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::child_meta;
use crate::access::ApiCall;
use crate::names;
use crate::validate::Validated;

/// What the reader's cluster layer (reader/src/cluster: leases, sink health, rate share) asks of
/// the API server: the rules of the ClusterRole `sluice-reader`.
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

/// Binds the shared ClusterRole to the readers' account (`service_account::bind_to_account` names
/// the account the pods really run as) in the source's namespace only.
pub(super) fn role_binding(valid: &Validated<'_>, owner: &OwnerReference) -> RoleBinding {
    RoleBinding {
        metadata: child_meta(valid, owner, names::reader_binding_name(&valid.name)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: names::READER_CLUSTER_ROLE.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: names::reader_name(&valid.name),
            namespace: Some(valid.namespace.clone()),
            api_group: None,
        }]),
    }
}
