//! Every other target a source names: the queues of its sqs sinks (the dead-letter sink's too)
//! and the buckets of its s3 sinks.
//!
//! Why check them here: a missing dead-letter queue or bucket is otherwise found only by the
//! readers, message by message, as a failure they keep retrying. Checked by the operator, each
//! becomes `TargetsReachable=False` naming the field, before anything is lost or looped.

use futures::future::BoxFuture;
use sluice_crds::{Credentials, SqsSourceSpec};

use super::QueueError;

/// What a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// An SQS queue, by URL.
    Queue,
    /// An S3 bucket, by name.
    Bucket,
}

/// One target as the spec names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The field naming it, e.g. `spec.deadLetterSink.sqs.queueUrl`.
    pub field: String,
    pub kind: TargetKind,
    /// Queue URL or bucket name.
    pub name: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

/// Checks that one target exists and may be reached. Implementations bound their time.
pub trait TargetInspector: Send + Sync {
    fn check<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<(), QueueError>>;

    /// The same with the identity a source's credentials name (`crate::identity`): a target the
    /// source's role may reach need not be reachable by the operator's own identity. By default the
    /// inspector's own.
    fn check_as<'a>(
        &'a self,
        target: &'a Target,
        _credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        self.check(target)
    }
}

/// What was learned about one target.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetObservation {
    pub target: Target,
    pub result: Result<(), QueueError>,
}

/// The targets of `spec`, sinks in order, then the dead-letter sink.
pub fn targets(spec: &SqsSourceSpec) -> Vec<Target> {
    let sinks = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let dead = spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s));
    let mut out = Vec::new();
    for (field, sink) in sinks.chain(dead) {
        if let Some(sqs) = &sink.sqs {
            out.push(Target {
                field: format!("{field}.sqs.queueUrl"),
                kind: TargetKind::Queue,
                name: sqs.queue_url.clone(),
                endpoint: sqs.endpoint.clone(),
                region: sqs.resolved_region(),
            });
        }
        if let Some(s3) = &sink.s3 {
            out.push(Target {
                field: format!("{field}.s3.bucket"),
                kind: TargetKind::Bucket,
                name: s3.bucket.clone(),
                endpoint: s3.endpoint.clone(),
                region: s3.region.clone(),
            });
        }
    }
    out.extend(super::payload_buckets::targets(spec));
    out
}

/// Checks every target of `spec`, one after the other (sources have few).
pub async fn check_all(inspector: &dyn TargetInspector, spec: &SqsSourceSpec) -> Vec<TargetObservation> {
    let mut out = Vec::new();
    for target in targets(spec) {
        let result = inspector.check_as(&target, &spec.credentials).await;
        out.push(TargetObservation { target, result });
    }
    out
}

impl TargetObservation {
    /// One line for the condition: what, where, and what to do; None when the target is fine.
    pub fn problem(&self) -> Option<String> {
        let t = &self.target;
        let (what, permission) = match t.kind {
            TargetKind::Queue => ("queue", "sqs:GetQueueAttributes on the queue"),
            TargetKind::Bucket => ("bucket", "s3:ListBucket on the bucket (HeadBucket)"),
        };
        match &self.result {
            Ok(()) => None,
            Err(QueueError::DoesNotExist) => {
                Some(format!("{}: {what} {} does not exist: create it, or fix {}", t.field, t.name, t.field))
            }
            Err(QueueError::Denied(why)) => Some(format!(
                "{}: {what} {}: {why}: grant the operator's AWS identity {permission}",
                t.field, t.name
            )),
            Err(QueueError::Unavailable(why)) => {
                Some(format!("{}: {what} {} could not be checked: {why}; retrying", t.field, t.name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn sqs_and_s3_sinks_and_the_dead_letter_sink_are_targets() {
        let mut spec = fixtures::source(fixtures::BASIC).spec;
        spec.sinks.push(
            serde_json::from_value(serde_json::json!({"name": "copy", "sqs": {"queueUrl": "https://sqs.eu-west-1.amazonaws.com/1/copies"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        spec.sinks.push(
            serde_json::from_value(serde_json::json!({"name": "archive", "s3": {"bucket": "archive", "endpoint": "http://127.0.0.1:4566"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        spec.dead_letter_sink = Some(
            serde_json::from_value(serde_json::json!({"name": "dead", "sqs": {"queueUrl": "https://sqs.eu-west-1.amazonaws.com/1/dead"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let got: Vec<(String, TargetKind, Option<String>)> =
            targets(&spec).into_iter().map(|t| (t.field, t.kind, t.region)).collect();
        assert_eq!(
            got,
            vec![
                ("spec.sinks[1].sqs.queueUrl".to_owned(), TargetKind::Queue, Some("eu-west-1".to_owned())),
                ("spec.sinks[2].s3.bucket".to_owned(), TargetKind::Bucket, None),
                (
                    "spec.deadLetterSink.sqs.queueUrl".to_owned(),
                    TargetKind::Queue,
                    Some("eu-west-1".to_owned())
                ),
            ]
        );
    }
}
