//! The buckets a source's payloads live in, as far as the spec names them in advance: the buckets
//! `spec.payload.s3.buckets` lists (S3 notifications and Extended Client pointers are fetched from
//! them) and each sqs sink's `offload.bucket`.
//!
//! Why only these: the bucket of a notification or a pointer is in the message; the operator can
//! check only what the spec names. They join the other targets, so a missing bucket or a denied
//! identity shows in `TargetsReachable` (HeadBucket, with the source's identity) before the first
//! object is dead-lettered for it.
//!
//! `spec.payload.extendedClient.deleteObjects` also needs `s3:DeleteObject` on the payload
//! buckets, which no read-only call can test without deleting something: a missing grant shows in
//! the readers (a WARN line naming the action, `sluice_reader_payload_object_deletes_total`), not
//! here.

use sluice_crds::SqsSourceSpec;

use super::targets::{Target, TargetKind};

/// Payload buckets of `spec`, in spec order: `spec.payload.s3.buckets`, then the offload bucket of
/// each sqs sink (sinks in order, then the dead-letter sink).
pub fn targets(spec: &SqsSourceSpec) -> Vec<Target> {
    let payload_s3 = spec.payload.s3.as_ref();
    let fetched =
        payload_s3.into_iter().flat_map(|s3| s3.buckets.iter().enumerate()).map(|(i, bucket)| Target {
            field: format!("spec.payload.s3.buckets[{i}]"),
            kind: TargetKind::Bucket,
            name: bucket.clone(),
            endpoint: payload_s3.and_then(|s| s.endpoint.clone()),
            region: payload_s3.and_then(|s| s.region.clone()),
        });
    let sinks = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let dead = spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s));
    let offloads = sinks.chain(dead).filter_map(|(field, sink)| {
        let sqs = sink.sqs.as_ref()?;
        let offload = sqs.offload.as_ref()?;
        Some(Target {
            field: format!("{field}.sqs.offload.bucket"),
            kind: TargetKind::Bucket,
            name: offload.bucket.clone(),
            endpoint: offload.endpoint.clone().or_else(|| sqs.endpoint.clone()),
            region: sqs.resolved_region(),
        })
    });
    fetched.chain(offloads).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn listed_payload_buckets_and_offload_buckets_are_targets() {
        let mut spec = fixtures::source(fixtures::BASIC).spec;
        spec.payload = serde_json::from_value(serde_json::json!({"format": "s3Notification",
            "s3": {"endpoint": "http://127.0.0.1:4566", "buckets": ["inbox", "large"]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        spec.sinks.push(
            serde_json::from_value(serde_json::json!({"name": "copy", "sqs": {
                "queueUrl": "https://sqs.eu-west-1.amazonaws.com/1/copies", "offload": {"bucket": "spill"}}}))
            .unwrap_or_else(|e| panic!("{e}")),
        );
        let got: Vec<(String, String, Option<String>)> =
            targets(&spec).into_iter().map(|t| (t.field, t.name, t.endpoint)).collect();
        let local = Some("http://127.0.0.1:4566".to_owned());
        assert_eq!(
            got,
            vec![
                ("spec.payload.s3.buckets[0]".to_owned(), "inbox".to_owned(), local.clone()),
                ("spec.payload.s3.buckets[1]".to_owned(), "large".to_owned(), local),
                ("spec.sinks[1].sqs.offload.bucket".to_owned(), "spill".to_owned(), None),
            ]
        );
    }
}
