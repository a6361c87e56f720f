//! The targets a source names besides its own queues (sink queues, the dead-letter queue, sink
//! buckets), checked once at start: one WARN line per target that is missing or forbidden, naming
//! its field, and the reader not ready until each is found.
//!
//! Why not exit 2 as for a missing source queue: a target is often created by another team or
//! pipeline after the source, and the reader delivers to the others meanwhile (a failing
//! delivery is released on the backoff schedule, so nothing loops hot). Why unready: a target
//! that does not exist is a fault someone must see, before the first message fails on it.
//!
//! A missing target counts as found again when its sink delivers, or when a re-check (backed off,
//! 1 s doubling to [`LONGEST_RECHECK`]) finds it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use sluice_aws::{AwsFault, FaultClass};
use sluice_crds::SinkSpec;

use crate::aws::SqsClients;
use crate::config::settings::Settings;
use crate::process::backoff::backoff;
use crate::process::events::Event;
use crate::process::events::targets::{TargetFound, TargetMissing, TargetsFound};
use crate::process::metrics::Metrics;
use crate::process::stop::Stop;

const FIRST_RECHECK: Duration = Duration::from_secs(1);
const LONGEST_RECHECK: Duration = Duration::from_secs(60);
const TICK: Duration = Duration::from_secs(1);

/// One target: where the spec names it, which sink delivers to it, and how to reach it.
struct Target {
    field: String,
    sink: String,
    kind: Kind,
}

enum Kind {
    Queue { client: aws_sdk_sqs::Client, url: String },
    Bucket { client: aws_sdk_s3::Client, bucket: String },
}

/// What a check found.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Yes,
    /// Missing or forbidden: the user must act. One line.
    Problem(String),
    /// The check itself failed (an outage): not a verdict on the target.
    Unknown(String),
}

/// The source's sink queues, dead-letter queue and sink buckets.
fn targets(settings: &Settings, clients: &mut SqsClients) -> Vec<Target> {
    let spec = &settings.spec;
    let named = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let named = named.chain(spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s)));
    named.filter_map(|(at, s)| target(&at, s, clients)).collect()
}

fn target(at: &str, spec: &SinkSpec, clients: &mut SqsClients) -> Option<Target> {
    let sink = spec.name.clone();
    if let Some(sqs) = &spec.sqs {
        let client = clients.client(sqs.endpoint.as_deref(), sqs.region.as_deref());
        let kind = Kind::Queue { client, url: sqs.queue_url.clone() };
        return Some(Target { field: format!("{at}.sqs.queueUrl"), sink, kind });
    }
    let s3 = spec.s3.as_ref()?;
    let mut config = aws_sdk_s3::config::Builder::from(clients.base());
    if let Some(endpoint) = &s3.endpoint {
        config = config.endpoint_url(endpoint);
    }
    if s3.endpoint.is_some() || clients.base().endpoint_url().is_some() {
        config = config.force_path_style(true);
    }
    if let Some(region) = &s3.region {
        config = config.region(aws_config::Region::new(region.clone()));
    }
    let client = aws_sdk_s3::Client::from_conf(config.interceptor(clients.requests().interceptor()).build());
    let kind = Kind::Bucket { client, bucket: s3.bucket.clone() };
    Some(Target { field: format!("{at}.s3.bucket"), sink, kind })
}

impl Target {
    async fn check(&self) -> Found {
        match &self.kind {
            Kind::Queue { client, url } => {
                let answer = client
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::QueueArn)
                    .send()
                    .await;
                match answer {
                    Ok(_) => Found::Yes,
                    Err(e) => {
                        let grant = Some("sqs:SendMessage and sqs:GetQueueAttributes");
                        self.judge(&AwsFault::of(&e), &format!("queue {url}"), grant)
                    }
                }
            }
            Kind::Bucket { client, bucket } => match client.head_bucket().bucket(bucket).send().await {
                Ok(_) => Found::Yes,
                // HeadBucket is authorized as s3:ListBucket, which a least-privilege reader policy
                // may grant only under a prefix condition: a refusal says nothing about the bucket.
                Err(e) => self.judge(&AwsFault::of(&e), &format!("bucket {bucket}"), None),
            },
        }
    }

    /// Missing is a problem; denied is one when the check uses the permission the deliveries need
    /// (`grant`); anything else says nothing about the target.
    fn judge(&self, fault: &AwsFault, what: &str, grant: Option<&str>) -> Found {
        let field = &self.field;
        let sink = &self.sink;
        match (fault.class, grant) {
            (FaultClass::Missing, _) => Found::Problem(format!(
                "{field}: {what} does not exist (AWS {}): create it or fix the field; deliveries to sink {sink} fail and are retried with backoff until then, and the reader stays not ready",
                fault.code_or("404")
            )),
            (FaultClass::Denied, Some(permission)) => Found::Problem(format!(
                "{field}: access to {what} denied (AWS {}): grant the reader's identity {permission} on it; deliveries to sink {sink} fail until then, and the reader stays not ready",
                fault.code_or("403")
            )),
            _ => Found::Unknown(format!("{field}: cannot check {what}: {}", fault.text)),
        }
    }
}

/// Checks every target now, then re-checks the missing ones in a task until each is found or
/// `stop`. Readiness follows `ReaderHealth::targets_missing` (see `start::watch_readiness`).
pub async fn check(settings: &Settings, clients: &mut SqsClients, stop: &Stop, metrics: &Arc<Metrics>) {
    let targets = targets(settings, clients);
    if targets.is_empty() {
        return;
    }
    let mut open = Vec::new();
    for target in targets {
        match target.check().await {
            Found::Yes => {}
            Found::Problem(line) => {
                TargetMissing { field: &target.field, line: &line }.emit(metrics);
                open.push(target);
            }
            Found::Unknown(line) => tracing::warn!(field = %target.field, "{line}; deliveries will tell"),
        }
    }
    if open.is_empty() {
        return;
    }
    tokio::spawn(recheck(open, stop.clone(), metrics.clone()));
}

async fn recheck(mut open: Vec<Target>, stop: Stop, metrics: Arc<Metrics>) {
    let started_ms = sluice_protocol::now_ms();
    let mut delays = backoff(FIRST_RECHECK, LONGEST_RECHECK);
    let mut next = Instant::now() + delays.next().unwrap_or(LONGEST_RECHECK);
    while !open.is_empty() {
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = stop.stopped() => return,
        }
        let health = metrics.health.sink_report();
        let delivered = |t: &Target| {
            health.get(&t.sink).and_then(|h| h.last_success_ms).is_some_and(|ms| ms >= started_ms)
        };
        let mut still = Vec::new();
        let due = Instant::now() >= next;
        for target in open {
            let found = delivered(&target) || (due && target.check().await == Found::Yes);
            if found {
                TargetFound { field: &target.field }.emit(&metrics);
            } else {
                still.push(target);
            }
        }
        open = still;
        if due {
            next = Instant::now() + delays.next().unwrap_or(LONGEST_RECHECK);
        }
    }
    TargetsFound.emit(&metrics);
}

#[cfg(test)]
mod tests {
    use sluice_aws::Via;

    use super::*;

    fn bucket_target() -> Target {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        let kind = Kind::Bucket { client, bucket: "archive".into() };
        Target { field: "spec.sinks[1].s3.bucket".into(), sink: "archive".into(), kind }
    }

    fn answer(code: &str, status: u16) -> AwsFault {
        let class = sluice_aws::fault::answer_class(Some(code), Some(status));
        AwsFault { class, via: Via::Answer, code: Some(code.into()), status: Some(status), text: code.into() }
    }

    #[test]
    fn missing_is_a_problem_naming_the_field_and_a_refused_head_bucket_is_not() {
        let t = bucket_target();
        let Found::Problem(line) = t.judge(&answer("NotFound", 404), "bucket archive", None) else {
            panic!("a missing bucket is a problem")
        };
        assert!(
            line.starts_with("spec.sinks[1].s3.bucket: bucket archive does not exist (AWS NotFound): "),
            "{line}"
        );
        assert!(matches!(t.judge(&answer("Forbidden", 403), "bucket archive", None), Found::Unknown(_)));
        let Found::Problem(line) = t.judge(&answer("AccessDenied", 403), "queue q", Some("sqs:SendMessage"))
        else {
            panic!("a refused queue check is a problem")
        };
        assert!(line.contains("grant the reader's identity sqs:SendMessage on it"), "{line}");
    }
}
