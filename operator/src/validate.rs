//! Semantic checks of an `SqsSource` that the CRD schema and its CEL rules cannot make, or that
//! depend on the operator itself (the default reader image).
//!
//! Why it is pure and returns every problem at once: the result becomes a condition and an Event
//! that tell the user what to change; listing all problems saves them one edit-apply round trip
//! per mistake, and a pure function can be fed arbitrary specs by the property test. It also
//! guards objects written before a schema rule existed, or applied with validation turned off.
//!
//! The only way to get a [`Validated`] source is through [`validate`], and `build()` takes a
//! `Validated`, so children are never built from an unchecked spec.

use kube::ResourceExt;
use sluice_crds::{CredentialSource, Guarantee, QueueRef, SinkKind, SinkSpec, SqsSource};

/// Longest source name: it becomes a label value (63 characters).
pub const MAX_SOURCE_NAME: usize = 63;

/// One thing wrong with a spec: a PascalCase reason (condition reason and Event reason), the field
/// path, and a message that says what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Problem {
    fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { reason, field: field.into(), message: message.into() }
    }
}

/// A source that passed [`validate`], with what the build needs resolved.
#[derive(Clone, Debug)]
pub struct Validated<'a> {
    pub source: &'a SqsSource,
    pub name: String,
    pub namespace: String,
    /// `spec.reader.image`, else the operator's `--reader-image`.
    pub image: String,
}

/// Checks `source`; `default_image` is the operator's `--reader-image`.
pub fn validate<'a>(
    source: &'a SqsSource,
    default_image: Option<&str>,
) -> Result<Validated<'a>, Vec<Problem>> {
    let mut problems = Vec::new();
    let name = source.name_any();
    if name.is_empty() || name.len() > MAX_SOURCE_NAME {
        problems.push(Problem::new(
            "NameTooLong",
            "metadata.name",
            format!(
                "the source name must be 1-{MAX_SOURCE_NAME} characters because it becomes a label value; it has {}: recreate the source under a shorter name",
                name.len()
            ),
        ));
    }
    let namespace = source.namespace().unwrap_or_default();
    let spec = &source.spec;

    if spec.queues.is_empty() {
        problems.push(Problem::new(
            "NoQueues",
            "spec.queues",
            "spec.queues is empty: add at least one queue (url, or name plus region)",
        ));
    }
    for (i, queue) in spec.queues.iter().enumerate() {
        check_queue(i, queue, &mut problems);
    }
    check_credentials(source, &mut problems);
    check_receive(source, &mut problems);
    check_delivery(source, &mut problems);
    check_sinks(source, &mut problems);
    check_scaling(source, &mut problems);
    check_filter(source, &mut problems);
    crate::pod_checks::check(source, &mut problems);

    let image = spec.reader.image.as_deref().or(default_image).map(str::trim).filter(|i| !i.is_empty());
    if image.is_none() {
        problems.push(Problem::new(
            "ReaderImageMissing",
            "spec.reader.image",
            "no reader image: set spec.reader.image, or start the operator with --reader-image",
        ));
    }

    check_schema(source, &name, &namespace, &mut problems);

    match (problems.is_empty(), image) {
        (true, Some(image)) => Ok(Validated { source, name, namespace, image: image.to_owned() }),
        _ => Err(problems),
    }
}

/// The reader parses its `source.yaml` with `sluice_crds::validate`, which applies the CRD's
/// schema and CEL rules; a document it rejects would crash-loop every reader. So the operator
/// runs the same check on the same rendering first (it also catches objects stored before a rule
/// existed). Violations at a path already reported above are not repeated.
fn check_schema(source: &SqsSource, name: &str, namespace: &str, problems: &mut Vec<Problem>) {
    let rendered = crate::build::reader_view(source, name, namespace);
    let Ok(value) = serde_json::to_value(&rendered) else {
        return;
    };
    let Err(error) = sluice_crds::validate::validate_source_value(&value) else {
        return;
    };
    let self_loop_reported = problems.iter().any(|p| p.reason == SELF_LOOP);
    for violation in error.violations() {
        if problems.iter().any(|p| !violation.path.is_empty() && p.field == violation.path) {
            continue;
        }
        // The CEL rules' plain-URL case of what `self_loops` already named, field by field.
        if self_loop_reported && violation.message.contains("one of the source's own queues") {
            continue;
        }
        let reason = if violation.rule.is_some() { "RuleViolated" } else { "SchemaViolated" };
        let field = if violation.path.is_empty() { "spec".to_owned() } else { violation.path.clone() };
        problems.push(Problem::new(reason, &field, format!("{field}: {}", violation.message)));
    }
}

/// A comma-free, one-line summary of problems for a condition message.
pub fn summarize(problems: &[Problem]) -> String {
    problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; ")
}

fn check_queue(i: usize, queue: &QueueRef, problems: &mut Vec<Problem>) {
    let field = format!("spec.queues[{i}]");
    match (&queue.url, &queue.name) {
        (Some(_), Some(_)) => problems.push(Problem::new(
            "QueueRefAmbiguous",
            &field,
            format!("{field} sets both url and name: keep exactly one"),
        )),
        (None, None) => problems.push(Problem::new(
            "QueueRefIncomplete",
            &field,
            format!("{field} names no queue: set url, or name plus region"),
        )),
        (None, Some(name)) => {
            if queue.region.as_deref().is_none_or(str::is_empty) {
                problems.push(Problem::new(
                    "QueueRefIncomplete",
                    format!("{field}.region"),
                    format!("{field} gives name {name:?} without a region: add region (e.g. us-east-1) or give the full url"),
                ));
            }
            if !valid_queue_name(name) {
                problems.push(Problem::new(
                    "QueueNameInvalid",
                    format!("{field}.name"),
                    format!("{field}.name {name:?} is not an SQS queue name: use 1-80 letters, digits, - or _ (FIFO names end in .fifo)"),
                ));
            }
        }
        (Some(url), None) => {
            if !valid_queue_url(url) {
                problems.push(Problem::new(
                    "QueueUrlInvalid",
                    format!("{field}.url"),
                    format!("{field}.url {url:?} is not a queue URL: write https://sqs.REGION.amazonaws.com/ACCOUNT/NAME"),
                ));
            }
        }
    }
    if let Some(endpoint) = &queue.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        problems.push(Problem::new(
            "EndpointInvalid",
            format!("{field}.endpoint"),
            format!("{field}.endpoint {endpoint:?} must be an http(s) URL such as http://127.0.0.1:4566"),
        ));
    }
    if queue.weight == 0 {
        problems.push(Problem::new(
            "QueueWeightInvalid",
            format!("{field}.weight"),
            format!("{field}.weight is 0: use 1 or more"),
        ));
    }
}

fn valid_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    !base.is_empty()
        && name.len() <= 80
        && base.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn valid_queue_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return false;
    };
    let mut parts = rest.splitn(2, '/');
    let host = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let last = path.rsplit('/').next().unwrap_or_default();
    !host.is_empty() && !url.contains(['?', '#', ' ']) && valid_queue_name(last)
}

fn check_credentials(source: &SqsSource, problems: &mut Vec<Problem>) {
    let creds = &source.spec.credentials;
    match creds.source {
        CredentialSource::Secret => {
            match &creds.secret_ref {
                None => problems.push(Problem::new(
                    "CredentialsIncomplete",
                    "spec.credentials.secretRef",
                    "spec.credentials.source is Secret but secretRef is missing: add secretRef.name (a Secret in this namespace)",
                )),
                Some(secret) if secret.name.trim().is_empty() => problems.push(Problem::new(
                    "CredentialsIncomplete",
                    "spec.credentials.secretRef.name",
                    "spec.credentials.secretRef.name is empty: name the Secret holding the AWS keys",
                )),
                Some(_) => {}
            }
            if creds.role_arn.is_some() {
                problems.push(Problem::new(
                    "CredentialsInconsistent",
                    "spec.credentials.roleArn",
                    "spec.credentials.roleArn is set but source is Secret: remove roleArn or set source to AssumeRole",
                ));
            }
        }
        CredentialSource::AssumeRole => match creds.role_arn.as_deref() {
            None | Some("") => problems.push(Problem::new(
                "CredentialsIncomplete",
                "spec.credentials.roleArn",
                "spec.credentials.source is AssumeRole but roleArn is missing: set roleArn (arn:aws:iam::ACCOUNT:role/NAME)",
            )),
            Some(arn) if !arn.starts_with("arn:") || !arn.contains(":role/") => {
                problems.push(Problem::new(
                    "RoleArnInvalid",
                    "spec.credentials.roleArn",
                    format!("spec.credentials.roleArn {arn:?} is not a role ARN: write arn:aws:iam::ACCOUNT:role/NAME"),
                ))
            }
            Some(_) => {}
        },
        CredentialSource::DefaultChain => {
            if creds.secret_ref.is_some() || creds.role_arn.is_some() {
                problems.push(Problem::new(
                    "CredentialsInconsistent",
                    "spec.credentials.source",
                    "spec.credentials sets secretRef or roleArn but source is DefaultChain: set source to Secret or AssumeRole, or remove them",
                ));
            }
        }
    }
}

fn check_range(
    problems: &mut Vec<Problem>,
    field: &str,
    value: i64,
    min: i64,
    max: i64,
    reason: &'static str,
) {
    if value < min || value > max {
        problems.push(Problem::new(
            reason,
            field,
            format!("{field} is {value}: use a value from {min} to {max}"),
        ));
    }
}

fn check_receive(source: &SqsSource, problems: &mut Vec<Problem>) {
    let r = &source.spec.receive;
    let reason = "ReceiveOutOfRange";
    check_range(problems, "spec.receive.maxMessages", r.max_messages.into(), 1, 10, reason);
    check_range(problems, "spec.receive.waitTimeSeconds", r.wait_time_seconds.into(), 0, 20, reason);
    check_range(problems, "spec.receive.pollers", r.pollers.into(), 1, 64, reason);
    if let Some(v) = r.visibility_timeout_seconds {
        check_range(problems, "spec.receive.visibilityTimeoutSeconds", v.into(), 0, 43_200, reason);
    }
}

fn check_delivery(source: &SqsSource, problems: &mut Vec<Problem>) {
    let d = &source.spec.delivery;
    match (d.guarantee, d.checkpoint_interval_seconds) {
        (Guarantee::ExactlyOnce, None) => problems.push(Problem::new(
            "CheckpointIntervalMissing",
            "spec.delivery.checkpointIntervalSeconds",
            "spec.delivery.guarantee is exactlyOnce but checkpointIntervalSeconds is not set: set it (e.g. 10)",
        )),
        (_, Some(v)) => check_range(
            problems,
            "spec.delivery.checkpointIntervalSeconds",
            v.into(),
            1,
            3600,
            "CheckpointIntervalOutOfRange",
        ),
        _ => {}
    }
    let retry = &d.retry;
    if retry.max_attempts == 0 {
        problems.push(Problem::new(
            "RetryInvalid",
            "spec.delivery.retry.maxAttempts",
            "spec.delivery.retry.maxAttempts is 0: use 1 (no retry) or more",
        ));
    }
    if retry.initial_delay_ms > retry.max_delay_ms {
        problems.push(Problem::new(
            "RetryInvalid",
            "spec.delivery.retry.initialDelayMs",
            format!(
                "spec.delivery.retry.initialDelayMs ({}) exceeds maxDelayMs ({}): lower initialDelayMs or raise maxDelayMs",
                retry.initial_delay_ms, retry.max_delay_ms
            ),
        ));
    }
}

fn check_sink(field: &str, sink: &SinkSpec, problems: &mut Vec<Problem>) {
    if sink.kinds_set() != 1 {
        problems.push(Problem::new(
            "SinkKindInvalid",
            field,
            format!("{field} ({:?}) must set exactly one of {}", sink.name, SinkKind::listed()),
        ));
    }
    if sink.name.trim().is_empty() {
        problems.push(Problem::new(
            "SinkNameMissing",
            format!("{field}.name"),
            format!("{field}.name is empty: name the sink (it labels metrics and logs)"),
        ));
    }
    if let Some(route) = &sink.route
        && (route.attribute.is_empty() || route.values.is_empty())
    {
        problems.push(Problem::new(
            "SinkRouteInvalid",
            format!("{field}.route"),
            format!("{field}.route needs an attribute and at least one value, or remove route to send every message"),
        ));
    }
}

fn check_sinks(source: &SqsSource, problems: &mut Vec<Problem>) {
    let spec = &source.spec;
    if spec.sinks.is_empty() {
        problems.push(Problem::new(
            "NoSinks",
            "spec.sinks",
            "spec.sinks is empty: add at least one sink (http, sqs, s3 or log)",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut s3_places = std::collections::BTreeSet::new();
    for (i, sink) in spec.sinks.iter().enumerate() {
        let field = format!("spec.sinks[{i}]");
        check_sink(&field, sink, problems);
        if !seen.insert(sink.name.as_str()) {
            problems.push(Problem::new(
                "SinkNameDuplicate",
                format!("{field}.name"),
                format!("sink name {:?} is used twice: give each sink its own name", sink.name),
            ));
        }
        // The reader refuses this too (its object names carry reader and epoch, not the sink).
        if let Some(s3) = &sink.s3
            && !s3_places.insert((s3.bucket.as_str(), s3.prefix.trim_matches('/')))
        {
            problems.push(Problem::new(
                "SinkS3PlaceDuplicate",
                format!("{field}.s3.prefix"),
                format!(
                    "{field}.s3: bucket {:?} with prefix {:?} is already written by another s3 sink: give each s3 sink its own prefix",
                    s3.bucket, s3.prefix
                ),
            ));
        }
    }
    for (i, s3) in spec.sinks.iter().enumerate().filter_map(|(i, s)| Some((i, s.s3.as_ref()?))) {
        if let Err(why) = sluice_crds::key_template::parse(&s3.key_template) {
            let field = format!("spec.sinks[{i}].s3.keyTemplate");
            problems.push(Problem::new("SinkS3KeyTemplateInvalid", field.clone(), format!("{field}: {why}")));
        }
    }
    if let Some(dead) = &spec.dead_letter_sink {
        check_sink("spec.deadLetterSink", dead, problems);
    }
    // Every spelling of the source's own queue, not only the equal URLs the CEL rules compare.
    for found in sluice_crds::validate::self_loops(spec) {
        problems.push(Problem::new(SELF_LOOP, found.field.clone(), found.message()));
    }
}

/// `spec.filter`: an expression that does not compile (or names an unknown variable or function)
/// would have every reader exit at start; the apiserver cannot compile it, so it is said here.
fn check_filter(source: &SqsSource, problems: &mut Vec<Problem>) {
    if let Some(violation) = sluice_crds::validate::filter::check(&source.spec) {
        problems.push(Problem::new("FilterInvalid", violation.path.clone(), violation.to_string()));
    }
}

/// Reason of a sink that forwards into one of the source's own queues.
const SELF_LOOP: &str = "SinkIsSourceQueue";

fn check_scaling(source: &SqsSource, problems: &mut Vec<Problem>) {
    let s = &source.spec.scaling;
    let reason = "ScalingInvalid";
    if s.min_replicas < 0 {
        problems.push(Problem::new(
            reason,
            "spec.scaling.minReplicas",
            format!("spec.scaling.minReplicas is {}: use 0 or more", s.min_replicas),
        ));
    }
    if s.max_replicas < 1 {
        problems.push(Problem::new(
            reason,
            "spec.scaling.maxReplicas",
            format!("spec.scaling.maxReplicas is {}: use 1 or more", s.max_replicas),
        ));
    }
    if s.min_replicas > s.max_replicas {
        problems.push(Problem::new(
            reason,
            "spec.scaling.minReplicas",
            format!(
                "spec.scaling.minReplicas ({}) exceeds maxReplicas ({}): lower minReplicas or raise maxReplicas",
                s.min_replicas, s.max_replicas
            ),
        ));
    }
    if s.target_messages_per_replica < 1 {
        problems.push(Problem::new(
            reason,
            "spec.scaling.targetMessagesPerReplica",
            "spec.scaling.targetMessagesPerReplica must be 1 or more",
        ));
    }
    if s.poll_interval_seconds < 1 {
        problems.push(Problem::new(
            reason,
            "spec.scaling.pollIntervalSeconds",
            "spec.scaling.pollIntervalSeconds must be 1 or more",
        ));
    }
    if s.idle_poll_interval_seconds < 1 {
        problems.push(Problem::new(
            reason,
            "spec.scaling.idlePollIntervalSeconds",
            "spec.scaling.idlePollIntervalSeconds must be 1 or more",
        ));
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
