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
use json_patch::{PatchOperation, RemoveOperation, TestOperation};
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::finalizer;
use kube::{Api, Resource, ResourceExt};
use sluice_crds::SqsSource;

use crate::error::{Error, Result};

/// The operator's finalizer on every source it has reconciled.
pub const FINALIZER: &str = "sluice.dev/children";

/// The source as the API server has it now, if it is still the object the cache showed (same
/// uid), not being deleted, and still carries the finalizer; otherwise [`Error::SourceGone`].
pub async fn fresh(api: &Api<SqsSource>, cached: &SqsSource) -> Result<SqsSource> {
    let found = api.get_opt(&cached.name_any()).await?.ok_or(Error::SourceGone)?;
    let same = found.uid().is_some() && found.uid() == cached.uid();
    let live = found.meta().deletion_timestamp.is_none();
    let held = found.finalizers().iter().any(|f| f == FINALIZER);
    if same && live && held { Ok(found) } else { Err(Error::SourceGone) }
}

/// Maps the finalizer helper's errors onto ours; a 404 on the source means it is already gone.
pub fn from_finalizer(error: finalizer::Error<Error>) -> Error {
    match error {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => gone_if_not_found(e),
        other @ (finalizer::Error::UnnamedObject | finalizer::Error::InvalidFinalizer) => {
            Error::Build(other.to_string())
        }
    }
}

/// A 404 from a request about the source itself: it was removed meanwhile.
pub fn gone_if_not_found(error: kube::Error) -> Error {
    match &error {
        kube::Error::Api(status) if status.is_not_found() => Error::SourceGone,
        _ => Error::Kube(error),
    }
}

/// Releases the finalizer of a deleted object that does not parse (the helper needs a parsed
/// object), so a broken source can still be deleted. Does nothing unless it is being deleted.
pub async fn release_unparseable(
    api: &Api<DeserializeGuard<SqsSource>>,
    meta: &kube::core::ObjectMeta,
) -> Result<()> {
    let (Some(name), Some(_)) = (&meta.name, &meta.deletion_timestamp) else {
        return Ok(());
    };
    let finalizers = meta.finalizers.as_deref().unwrap_or_default();
    let Some(index) = finalizers.iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = PointerBuf::from_str(&format!("/metadata/finalizers/{index}"))
        .map_err(|e| Error::Build(format!("finalizer path: {e}")))?;
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation { path: path.clone(), value: FINALIZER.into() }),
        PatchOperation::Remove(RemoveOperation { path }),
    ]);
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await.map_err(gone_if_not_found)?;
    Ok(())
}
