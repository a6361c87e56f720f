//! Sluice's own admission rules for the local control plane.
//!
//! A cluster validates `SqsSource` objects with the CRD's schema and CEL rules; the control plane does
//! not interpret those, so it calls the same validator the reader uses for its `--source` file, and
//! refuses an invalid object with 422 and one cause per violation, as a cluster would.

use super::ControlPlane;
use super::error::Cause;

/// Validates `sluice.dev/SqsSource` objects with `sluice_crds::validate::validate_source_value`.
pub fn register_validators(cp: &ControlPlane) {
    cp.set_validator("sluice.dev", "SqsSource", |obj| {
        let mut body = obj.clone();
        // Status is written by the operator through the status subresource; the schema check is for spec.
        if let Some(m) = body.as_object_mut() {
            m.remove("status");
        }
        sluice_crds::validate::validate_source_value(&body).map(|_| ()).map_err(|e| {
            e.violations()
                .iter()
                .map(|v| Cause { field: v.path.clone(), message: v.message.clone() })
                .collect()
        })
    });
}
