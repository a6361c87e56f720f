//! The readers' ServiceAccount: created per source with the user's annotations, or an existing
//! one named in `spec.reader.serviceAccount`.
//!
//! Why here and not with the RoleBinding: the account is where a reader's AWS identity attaches on
//! EKS (IRSA reads `eks.amazonaws.com/role-arn` from it; a Pod Identity association names it), so
//! its shape follows the user's identity choice, while the binding only follows what readers call.
//! An existing account is never written: the platform team that annotated or associated it owns
//! it; the operator only binds the readers' ClusterRole to it.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::names;
use crate::validate::Validated;

/// The account the reader pods run as.
pub fn account_name(valid: &Validated<'_>) -> String {
    let account = &valid.source.spec.reader.service_account;
    account.name.clone().unwrap_or_else(|| names::reader_name(&valid.name))
}

/// The account to apply: `None` when the source uses an existing one.
pub(super) fn service_account(valid: &Validated<'_>, owner: &OwnerReference) -> Option<ServiceAccount> {
    let account = &valid.source.spec.reader.service_account;
    if !account.create {
        return None;
    }
    let mut created = super::rbac::service_account(valid, owner);
    created.metadata.name = Some(account_name(valid));
    if !account.annotations.is_empty() {
        created.metadata.annotations = Some(account.annotations.clone());
    }
    Some(created)
}

/// A hash of the created account's annotations, for the pod template: the EKS pod identity
/// webhook reads `eks.amazonaws.com/role-arn` (and the token settings) from the account only when
/// a pod is admitted, so a changed role reaches the readers only through new pods. `None` when
/// the account is not created here or has no annotations (nothing to follow).
pub(super) fn annotations_hash(valid: &Validated<'_>) -> Option<String> {
    let account = &valid.source.spec.reader.service_account;
    if !account.create || account.annotations.is_empty() {
        return None;
    }
    let lines: String = account.annotations.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    Some(super::config_hash(&lines))
}

/// Points the readers' RoleBinding at the account the pods actually run as.
pub(super) fn bind_to_account(binding: &mut RoleBinding, account: &str) {
    for subject in binding.subjects.iter_mut().flatten() {
        if subject.kind == "ServiceAccount" {
            account.clone_into(&mut subject.name);
        }
    }
}
