//! Writes the reconciler's part of the status subresource.
//!
//! Why an apply patch and not a merge or replace: several writers share this status (the
//! reconciler, the autoscaler, the checkpoint coordinator). With server-side apply each owns the
//! fields it sends, under its field manager, and nobody overwrites anybody else's conditions or
//! figures (the CRD lists `conditions` as a map keyed by `type`).

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use sluice_crds::{SqsSource, SqsSourceStatus};

use crate::access::ApiCall;
use crate::error::Result;
use crate::names::FIELD_MANAGER;

pub const API_CALLS: &[ApiCall] = &[ApiCall::new("sluice.dev", "sqssources/status", "patch")];

/// The apply-patch body: the object's type and the status, nothing else.
pub fn status_patch(status: &SqsSourceStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": SqsSource::api_version(&()),
        "kind": SqsSource::kind(&()),
        "status": status,
    })
}

pub async fn update_status(api: &Api<SqsSource>, name: &str, status: &SqsSourceStatus) -> Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(status_patch(status))).await?;
    Ok(())
}
