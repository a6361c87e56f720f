//! A source that is gone or being deleted never gets children again.
//!
//! Why a finalizer (as KEDA and kube-rs' controller-rs do): kube-runtime never runs two reconciles
//! of one object at once, and the finalizer keeps the object until the reconcile that sees its
//! deletion has run. So a reconcile that was applying children when the user deleted the source
//! finishes first; only then is the finalizer released and the garbage collector removes the
//! children. Without it the object vanished at once and an apply still under way re-created the
//! children of a source that no longer existed.
//!
//! Why also a fresh read by uid: the controller's cache can be behind the API server (after an API
//! server restart a relist may still hold a source that was removed, or an older one of the same
//! name). Reading the source right before the apply and comparing its uid closes that window; a
//! delete that lands between this read and the apply is held back by the finalizer.
//!
//! Cleanup deletes nothing itself: every child carries an owner reference to the source, so
//! releasing the finalizer hands them all to the garbage collector, and the operator keeps RBAC
//! without a delete verb.

use std::str::FromStr;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use sluice_crds::SqsSource;

use crate::error::{Error, Result};
use crate::own_writes::OwnWrites;

/// The operator's finalizer on every source it has reconciled.
pub const FINALIZER: &str = "sluice.dev/children";

/// The source as the API server has it now, if it is still the object the cache showed (same
/// uid) and not being deleted, with the finalizer on it: added here when it is not yet, and the
/// patch's answer recorded in `own` so its watch event starts no second reconcile. Otherwise
/// [`Error::SourceGone`].
///
/// Why here and not in a reconcile of its own (kube-runtime's `finalizer` helper adds it and
/// returns): that reconcile's patch comes back as a watch event that starts the first real one,
/// which for a thousand new sources is a thousand more passes through the reconcile queue.
pub async fn fresh(api: &Api<SqsSource>, cached: &SqsSource, own: &OwnWrites) -> Result<SqsSource> {
    let found = api.get_opt(&cached.name_any()).await?.ok_or(Error::SourceGone)?;
    let same = found.uid().is_some() && found.uid() == cached.uid();
    let live = found.meta().deletion_timestamp.is_none();
    if !(same && live) {
        return Err(Error::SourceGone);
    }
    if found.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(found);
    }
    let held = add_finalizer(api, &found).await?;
    own.wrote(&held);
    Ok(held)
}

/// Adds the finalizer, refused (409/422) if the finalizers changed since `found` was read.
async fn add_finalizer(api: &Api<SqsSource>, found: &SqsSource) -> Result<SqsSource> {
    let path = |p: &str| PointerBuf::from_str(p).map_err(|e| Error::Build(format!("finalizer path: {e}")));
    let ops = match found.meta().finalizers.as_deref() {
        None => vec![
            PatchOperation::Test(TestOperation {
                path: path("/metadata/finalizers")?,
                value: serde_json::Value::Null,
            }),
            PatchOperation::Add(AddOperation {
                path: path("/metadata/finalizers")?,
                value: vec![FINALIZER].into(),
            }),
        ],
        Some(present) => vec![
            PatchOperation::Test(TestOperation {
                path: path("/metadata/finalizers")?,
                value: present.into(),
            }),
            PatchOperation::Add(AddOperation {
                path: path("/metadata/finalizers/-")?,
                value: FINALIZER.into(),
            }),
        ],
    };
    let patch = json_patch::Patch(ops);
    api.patch(&found.name_any(), &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map_err(gone_if_not_found)
}

/// A 404 from a request about the source itself: it was removed meanwhile.
pub fn gone_if_not_found(error: kube::Error) -> Error {
    match &error {
        kube::Error::Api(status) if status.is_not_found() => Error::SourceGone,
        _ => Error::Kube(error),
    }
}

/// Releases the finalizer of a deleted object (parsed or not: `K` is the source or its guard, so
/// a broken source can still be deleted). Does nothing unless it is being deleted and holds it.
pub async fn release<K>(api: &Api<K>, meta: &kube::core::ObjectMeta) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (Some(name), Some(_)) = (&meta.name, &meta.deletion_timestamp) else {
        return Ok(());
    };
    let finalizers = meta.finalizers.as_deref().unwrap_or_default();
    let Some(index) = finalizers.iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = PointerBuf::from_str(&format!("/metadata/finalizers/{index}"))
        .map_err(|e| Error::Build(format!("finalizer path: {e}")))?;
    // `Test` makes the patch fail rather than remove someone else's finalizer.
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation { path: path.clone(), value: FINALIZER.into() }),
        PatchOperation::Remove(RemoveOperation { path }),
    ]);
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await.map_err(gone_if_not_found)?;
    Ok(())
}
