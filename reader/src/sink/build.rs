//! From the spec's `sinks` and `deadLetterSink` to running sinks.
//!
//! Why here and not in the pipeline: each kind validates its own fields (URLs, header names,
//! bucket) while it is built, so a bad spec fails before the reader receives anything, with a
//! message that names the field to change (`spec.sinks[0].http.url: not a valid URL: ...`).

use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_crds::{RetrySpec, RouteSpec, SinkBlock, SinkKind, SinkSpec};
use tokio_util::sync::CancellationToken;

use super::circuit::Circuits;
use super::dead_letter::DeadLetter;
use super::error::SinkBuildError;
use super::http::HttpSink;
use super::http_batch::HttpBatchSink;
use super::log::LogSink;
use super::retry::RetryPolicy;
use super::s3::S3Sink;
use super::sqs::SqsSink;
use super::{Sink, route};
use crate::aws::requests::Requests;
use crate::payload::StreamSource;
use crate::record::Record;

/// What building a sink needs besides its spec.
#[derive(Clone, Debug)]
pub struct SinkContext {
    /// This reader's identity (the pod name; any stable name standalone). Scopes s3 keys.
    pub reader_id: String,
    /// `spec.delivery.retry`.
    pub retry: RetrySpec,
    /// Loaded once by the reader (`aws_config::load_defaults`); sinks apply their own
    /// `endpoint` and `region` over it.
    pub aws: aws_config::SdkConfig,
    /// Cancelled when the reader stops: a record whose delivery has not started by then is not
    /// started at all (it goes back to the queue at once), only those under way are finished.
    pub stopping: CancellationToken,
    /// What the http and s3 sinks read streamed objects through (the payload stage's reader;
    /// absent when no payload lives in S3, and then no record carries an object).
    pub objects: Option<Arc<StreamSource>>,
    /// Where the AWS sinks' clients count their requests (the reader's `Metrics::requests`).
    pub requests: Arc<Requests>,
}

/// Build one sink; errors name fields relative to the sink (`http.url`), see `build_all`.
pub fn build(spec: &SinkSpec, ctx: &SinkContext) -> Result<Arc<dyn Sink>, SinkBuildError> {
    let policy = RetryPolicy::from_spec(&ctx.retry);
    let name = spec.name.as_str();
    if name.is_empty() {
        return Err(SinkBuildError::new("name", "must not be empty"));
    }
    let Some(block) = spec.block() else {
        let kinds = SinkKind::listed();
        return Err(SinkBuildError::new("", format!("exactly one of {kinds} must be set")));
    };
    let sink: Arc<dyn Sink> = match block {
        SinkBlock::Http(http) => {
            let sink = HttpSink::new(name, http, policy)?
                .stopping(ctx.stopping.clone())
                .objects(ctx.objects.clone());
            match &http.batch {
                None => Arc::new(sink),
                Some(batch) => Arc::new(HttpBatchSink::new(sink, batch)?),
            }
        }
        SinkBlock::Sqs(sqs) => Arc::new(SqsSink::new(name, sqs, &ctx.aws, &ctx.requests, policy)?),
        SinkBlock::S3(s3) => {
            let sink = S3Sink::new(name, s3, &ctx.aws, &ctx.requests, &ctx.reader_id, policy)?;
            Arc::new(sink.stopping(ctx.stopping.clone()).objects(ctx.objects.clone()))
        }
        SinkBlock::Log(log) => Arc::new(LogSink::new(name, log)),
    };
    Ok(sink)
}

/// A built sink and the route that selects its records.
pub struct RoutedSink {
    pub sink: Arc<dyn Sink>,
    pub route: Option<RouteSpec>,
}

/// Every sink of a source.
pub struct Sinks {
    pub sinks: Vec<RoutedSink>,
    pub dead_letter: Option<DeadLetter>,
    /// Their circuit breakers, which the dispatcher feeds and the pollers, the held deliveries,
    /// `/readyz` and the health report obey.
    pub circuits: Arc<Circuits>,
}

impl Sinks {
    /// Indexes into `sinks` of the sinks that take `record` (see `route`).
    pub fn targets(&self, record: &Record) -> Vec<usize> {
        route::targets(self.sinks.iter().map(|s| s.route.as_ref()), record)
    }
}

/// Build `spec.sinks` and `spec.deadLetterSink`, naming fields from `spec.`.
pub fn build_all(
    sinks: &[SinkSpec],
    dead_letter: Option<&SinkSpec>,
    ctx: &SinkContext,
) -> Result<Sinks, SinkBuildError> {
    if sinks.is_empty() {
        return Err(SinkBuildError::new("spec.sinks", "at least one sink is required"));
    }
    let mut names = BTreeSet::new();
    let mut s3_places = BTreeSet::new();
    let mut built = Vec::with_capacity(sinks.len());
    for (i, spec) in sinks.iter().enumerate() {
        let at = format!("spec.sinks[{i}]");
        if !names.insert(spec.name.as_str()) {
            return Err(
                SinkBuildError::new("name", format!("{:?} is used by another sink", spec.name)).within(&at)
            );
        }
        // Object names carry the reader and the epoch, not the sink: two s3 sinks writing to the same
        // place would overwrite each other's output.
        if let Some(s3) = &spec.s3
            && !s3_places.insert((s3.bucket.as_str(), s3.prefix.trim_matches('/')))
        {
            return Err(SinkBuildError::new(
                "s3.prefix",
                format!(
                    "bucket {:?} with prefix {:?} is already written by another s3 sink: give each s3 sink its own prefix",
                    s3.bucket, s3.prefix
                ),
            )
            .within(&at));
        }
        let sink = build(spec, ctx).map_err(|e| e.within(&at))?;
        built.push(RoutedSink { sink, route: spec.route.clone() });
    }
    let dead_letter = match dead_letter {
        None => None,
        Some(spec) => {
            let at = "spec.deadLetterSink";
            if spec.kind().is_some_and(|k| !k.can_dead_letter()) {
                return Err(SinkBuildError::new("", "a dead-letter sink must be http or sqs").within(at));
            }
            if spec.route.is_some() {
                return Err(
                    SinkBuildError::new("route", "a dead-letter sink takes every rejected record").within(at)
                );
            }
            Some(DeadLetter::new(build(spec, ctx).map_err(|e| e.within(at))?))
        }
    };
    Ok(Sinks { sinks: built, dead_letter, circuits: Arc::default() })
}

#[cfg(test)]
mod tests {
    use sluice_crds::{
        HttpSinkSpec, LogSinkSpec, S3BufferSpec, S3Compression, S3KeyTime, S3SinkSpec, SqsSinkSpec,
    };

    use super::*;
    use crate::sink::EpochSupport;

    fn ctx() -> SinkContext {
        let aws = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .build();
        SinkContext {
            reader_id: "reader-0".into(),
            retry: RetrySpec::default(),
            aws,
            stopping: CancellationToken::new(),
            objects: None,
            requests: Arc::default(),
        }
    }

    fn sink(name: &str) -> SinkSpec {
        SinkSpec { name: name.into(), http: None, sqs: None, s3: None, log: None, route: None }
    }

    fn http(name: &str, url: &str) -> SinkSpec {
        let spec = HttpSinkSpec {
            url: url.into(),
            timeout_ms: 1000,
            concurrency: 4,
            headers: Default::default(),
            event_type: "t".into(),
            secret_refs: None,
            batch: None,
        };
        SinkSpec { http: Some(spec), ..sink(name) }
    }

    fn sqs(name: &str, url: &str) -> SinkSpec {
        SinkSpec {
            sqs: Some(SqsSinkSpec {
                queue_url: url.into(),
                endpoint: None,
                region: None,
                message_group_id: None,
                offload: None,
            }),
            ..sink(name)
        }
    }

    fn log(name: &str) -> SinkSpec {
        SinkSpec { log: Some(LogSinkSpec::default()), ..sink(name) }
    }

    #[test]
    fn builds_every_kind_with_its_epoch_support() {
        let s3 = S3SinkSpec {
            bucket: "out".into(),
            prefix: "p".into(),
            endpoint: None,
            region: None,
            sse_kms_key_id: None,
            buffer: S3BufferSpec::default(),
            compression: S3Compression::None,
            key_template: String::new(),
            key_time: S3KeyTime::SentTimestamp,
        };
        let twin = SinkSpec { s3: Some(S3SinkSpec { prefix: "/p/".into(), ..s3.clone() }), ..sink("s2") };
        let clash = build_all(&[SinkSpec { s3: Some(s3.clone()), ..sink("s1") }, twin], None, &ctx());
        let message = clash.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.starts_with("spec.sinks[1].s3.prefix: bucket \"out\""), "{message}");
        let specs = vec![
            http("h", "http://127.0.0.1:9/x"),
            sqs("q", "http://127.0.0.1:4566/queue/us-east-1/000000000000/out.fifo"),
            sqs("std", "http://127.0.0.1:4566/queue/us-east-1/000000000000/out"),
            SinkSpec { s3: Some(s3), ..sink("s") },
            log("l"),
        ];
        let dl = sqs("dl", "http://127.0.0.1:4566/queue/us-east-1/000000000000/dlq");
        let built = build_all(&specs, Some(&dl), &ctx()).unwrap();
        let support: Vec<_> = built.sinks.iter().map(|s| (s.sink.name(), s.sink.epoch_support())).collect();
        assert_eq!(
            support,
            vec![
                ("h", EpochSupport::Idempotent),
                ("q", EpochSupport::Idempotent),
                ("std", EpochSupport::None),
                ("s", EpochSupport::Transactional),
                ("l", EpochSupport::None),
            ]
        );
        assert_eq!(built.dead_letter.unwrap().sink().name(), "dl");
    }

    #[test]
    fn a_malformed_url_names_the_field() {
        let err = build_all(&[log("l"), http("h", "not a url")], None, &ctx()).err().unwrap();
        assert_eq!(err.field, "spec.sinks[1].http.url");
        assert!(err.to_string().starts_with("spec.sinks[1].http.url: not a valid URL"), "{err}");
        let err = build_all(&[sqs("q", "queue")], None, &ctx()).err().unwrap();
        assert_eq!(err.field, "spec.sinks[0].sqs.queueUrl");
        let err = build_all(&[log("l")], Some(&http("dl", "http://")), &ctx()).err().unwrap();
        assert_eq!(err.field, "spec.deadLetterSink.http.url");
    }

    #[test]
    fn kinds_names_and_dead_letter_kinds_are_checked() {
        let both = SinkSpec { log: Some(LogSinkSpec::default()), ..http("x", "http://127.0.0.1:9/") };
        let err = build_all(&[both], None, &ctx()).err().unwrap();
        assert_eq!(err.to_string(), "spec.sinks[0]: exactly one of http, sqs, s3, log must be set");
        let err = build_all(&[log("a"), log("a")], None, &ctx()).err().unwrap();
        assert_eq!(err.field, "spec.sinks[1].name");
        let err = build_all(&[log("a")], Some(&log("dl")), &ctx()).err().unwrap();
        assert_eq!(err.field, "spec.deadLetterSink");
        assert_eq!(build_all(&[], None, &ctx()).err().unwrap().field, "spec.sinks");
    }

    #[test]
    fn routes_pick_sinks() {
        let mut routed = log("orders");
        routed.route = Some(RouteSpec { attribute: "kind".into(), values: vec!["order".into()] });
        let built = build_all(&[log("all"), routed], None, &ctx()).unwrap();
        let mut r = crate::sink::testing::record("m");
        assert_eq!(built.targets(&r), vec![0]);
        r.message_attributes.insert("kind".into(), "order".into());
        assert_eq!(built.targets(&r), vec![0, 1]);
    }
}
