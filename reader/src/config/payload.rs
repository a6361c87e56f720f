//! `spec.payload`'s fetch settings, checked: the bounds on object fetching and where objects are
//! read from.
//!
//! Why checked here and not left to the CRD: a reader also runs from a file without the API
//! server's validation, and a byte budget smaller than the largest object would stall the first
//! large object forever.

use sluice_crds::{PayloadFormat, PayloadSpec};

use crate::process::error::{Error, Result};

/// The bounds of one reader's fetching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_object_bytes: u64,
    pub max_concurrent_fetches: usize,
    pub max_bytes_in_flight: u64,
    /// Objects over this are streamed by the sinks, not held (`spec.payload.streamAboveBytes`).
    pub stream_above_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadSettings {
    pub format: PayloadFormat,
    /// Resolve Extended Client pointers.
    pub pointers: bool,
    pub bounds: Bounds,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// `s3.buckets`: the only buckets objects are fetched from (empty: any).
    pub buckets: Vec<String>,
    /// `extendedClient.deleteObjects`: delete a pointer's object once its message is deleted.
    pub delete_objects: bool,
}

impl PayloadSettings {
    pub fn from_spec(spec: &PayloadSpec) -> Result<Self> {
        if !(1..=256).contains(&spec.max_concurrent_fetches) {
            return Err(Error::config("spec.payload.maxConcurrentFetches", "must be 1-256"));
        }
        // Only the largest object held whole must fit in the budget: notified objects above
        // streamAboveBytes are streamed, Extended Client payloads (the message body) never are.
        let (largest_held, which) = if spec.extended_client.resolve {
            (spec.max_object_bytes, "maxObjectBytes: Extended Client payloads are held whole")
        } else {
            (
                spec.max_object_bytes.min(spec.stream_above_bytes),
                "the smaller of maxObjectBytes and streamAboveBytes",
            )
        };
        if spec.max_bytes_in_flight < largest_held {
            return Err(Error::config(
                "spec.payload.maxBytesInFlight",
                format!(
                    "is {} but must be at least the largest object held whole ({largest_held}, {which}), or that object could never be fetched: raise it, or lower maxObjectBytes or streamAboveBytes",
                    spec.max_bytes_in_flight
                ),
            ));
        }
        let endpoint = spec.s3.as_ref().and_then(|s| s.endpoint.clone());
        if let Some(endpoint) = &endpoint {
            let ok = reqwest::Url::parse(endpoint).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !ok {
                return Err(Error::config(
                    "spec.payload.s3.endpoint",
                    format!("{endpoint} is not an http(s) URL, e.g. http://127.0.0.1:4566"),
                ));
            }
        }
        let delete_objects = spec.extended_client.delete_objects;
        if delete_objects && !spec.extended_client.resolve {
            return Err(Error::config(
                "spec.payload.extendedClient.deleteObjects",
                "needs resolve: true (only objects whose payload the reader fetched are deleted): set resolve to true or deleteObjects to false",
            ));
        }
        if delete_objects && spec.format == PayloadFormat::S3Notification {
            return Err(Error::config(
                "spec.payload.extendedClient.deleteObjects",
                "does not apply to format s3Notification (its objects are not Extended Client payloads): set it to false",
            ));
        }
        Ok(Self {
            delete_objects,
            format: spec.format,
            pointers: spec.extended_client.resolve,
            bounds: Bounds {
                max_object_bytes: spec.max_object_bytes,
                max_concurrent_fetches: spec.max_concurrent_fetches as usize,
                max_bytes_in_flight: spec.max_bytes_in_flight,
                stream_above_bytes: spec.stream_above_bytes,
            },
            endpoint,
            region: spec.s3.as_ref().and_then(|s| s.region.clone()),
            buckets: spec.s3.as_ref().map(|s| s.buckets.clone()).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::ExtendedClientSpec;

    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_bounds_name_their_field() {
        let settings = PayloadSettings::from_spec(&PayloadSpec::default()).unwrap();
        assert!(settings.pointers);
        assert_eq!(settings.bounds.max_object_bytes, 64 * 1024 * 1024);
        let small_budget = PayloadSpec { max_bytes_in_flight: 1, ..PayloadSpec::default() };
        let err = PayloadSettings::from_spec(&small_budget).unwrap_err().to_string();
        assert!(err.contains("spec.payload.maxBytesInFlight"), "{err}");
        assert!(err.contains("streamAboveBytes"), "{err}");
        // Streamed objects are not held whole: without Extended Client payloads (held whole), a
        // 4 GiB limit fits a budget of the default 256 MiB.
        let huge = PayloadSpec {
            max_object_bytes: 4 << 30,
            extended_client: sluice_crds::ExtendedClientSpec { resolve: false, delete_objects: false },
            ..PayloadSpec::default()
        };
        assert_eq!(PayloadSettings::from_spec(&huge).unwrap().bounds.stream_above_bytes, 8 << 20);
        let resolving =
            PayloadSpec { extended_client: sluice_crds::ExtendedClientSpec::default(), ..huge.clone() };
        let err = PayloadSettings::from_spec(&resolving).unwrap_err().to_string();
        assert!(err.contains("Extended Client payloads are held whole"), "{err}");
        let unstreamed = PayloadSpec { stream_above_bytes: 4 << 30, ..huge };
        let err = PayloadSettings::from_spec(&unstreamed).unwrap_err().to_string();
        assert!(err.contains("spec.payload.maxBytesInFlight"), "{err}");
        let zero = PayloadSpec { max_concurrent_fetches: 0, ..PayloadSpec::default() };
        let err = PayloadSettings::from_spec(&zero).unwrap_err().to_string();
        assert!(err.contains("spec.payload.maxConcurrentFetches"), "{err}");
    }

    #[test]
    fn deleting_objects_is_off_by_default_and_needs_resolved_pointers() {
        assert!(!PayloadSettings::from_spec(&PayloadSpec::default()).unwrap().delete_objects);
        let on = ExtendedClientSpec { resolve: true, delete_objects: true };
        let spec = PayloadSpec { extended_client: on.clone(), ..PayloadSpec::default() };
        assert!(PayloadSettings::from_spec(&spec).unwrap().delete_objects);
        for bad in [
            PayloadSpec {
                extended_client: ExtendedClientSpec { resolve: false, ..on.clone() },
                ..spec.clone()
            },
            PayloadSpec { format: PayloadFormat::S3Notification, ..spec.clone() },
        ] {
            let err = PayloadSettings::from_spec(&bad).unwrap_err().to_string();
            assert!(err.contains("spec.payload.extendedClient.deleteObjects"), "{err}");
        }
    }
}
