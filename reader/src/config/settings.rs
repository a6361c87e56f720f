//! The reader's runtime settings: the `SqsSource` spec checked and turned into typed values.
//!
//! Why one place: every bound the reader relies on (1-10 messages per receive, a long-poll wait
//! SQS accepts, at least one poller per queue) is checked here once, with an error naming the
//! spec field, so the rest of the pipeline takes its values as given. Sinks validate their own
//! fields when they are built (`sink::build_all`).

use std::time::Duration;

use sluice_crds::{CredentialSource, Guarantee, PayloadFormat, SqsSource, SqsSourceSpec};

use crate::config::queue_url::QueueUrl;
use crate::process::error::{Error, Result};

#[derive(Clone, Debug)]
pub struct Settings {
    /// `metadata.name` of the SqsSource (`standalone` when absent).
    pub source_name: String,
    pub queues: Vec<QueueSettings>,
    pub receive: ReceiveSettings,
    pub rate: RateSettings,
    pub guarantee: Guarantee,
    pub checkpoint_interval: Option<Duration>,
    pub fail_on_error: bool,
    pub payload: PayloadFormat,
    pub credentials: CredentialSettings,
    /// The whole spec, for building sinks (`sinks`, `deadLetterSink`, `delivery.retry`).
    pub spec: SqsSourceSpec,
}

/// Where a queue is: a checked URL, or a name resolved with GetQueueUrl at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueLocation {
    Url(QueueUrl),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    /// Position in `spec.queues`, for error messages.
    pub index: usize,
    pub location: QueueLocation,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    pub weight: u32,
    pub fifo: bool,
}

impl QueueSettings {
    pub fn field(&self) -> String {
        format!("spec.queues[{}]", self.index)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveSettings {
    pub max_messages: i32,
    pub wait_time_seconds: i32,
    /// `None`: the queue's own VisibilityTimeout, read at start.
    pub visibility_timeout_seconds: Option<i32>,
    pub pollers: usize,
    pub attribute_names: Vec<String>,
    pub message_attribute_names: Vec<String>,
    pub held: HeldSettings,
    /// `spec.receive.batchWindowMilliseconds` (zero: off): how long a part-full receive makes
    /// the next one wait, and deletes and visibility changes wait to fill a batch.
    pub batch_window: Duration,
}

/// Ceilings on what one reader holds (`spec.receive.held`); `intake::bound` works out the bound in
/// force below them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldSettings {
    pub max_messages: usize,
    pub max_bytes: u64,
    pub horizon: Duration,
}

/// The source-wide rate; a replica applies its share (`Limiter::set_rate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RateSettings {
    pub messages_per_second: Option<u32>,
    pub bytes_per_second: Option<u64>,
    pub burst_seconds: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSettings {
    /// Environment, profile, web identity (IRSA), Pod Identity, IMDS. The operator injects a
    /// Secret's keys as environment variables, so `secretRef` also lands here.
    DefaultChain,
    AssumeRole {
        role_arn: String,
        external_id: Option<String>,
        /// `spec.credentials.sessionName`; absent, the reader's id (its pod), so CloudTrail shows
        /// which reader made a call.
        session_name: Option<String>,
    },
}

impl Settings {
    pub fn from_source(source: &SqsSource) -> Result<Self> {
        let name = source.metadata.name.clone().unwrap_or_else(|| "standalone".into());
        Self::from_spec(name, &source.spec)
    }

    pub fn from_spec(source_name: String, spec: &SqsSourceSpec) -> Result<Self> {
        if spec.queues.is_empty() {
            return Err(Error::config("spec.queues", "at least one queue is required"));
        }
        // The same rule the CRD's CEL and the operator apply, for the forms CEL cannot see (a
        // queue by name and region, an endpoint override) and for standalone runs, which have
        // neither: forwarding into its own queue would receive and forward each message forever.
        if let Some(found) = sluice_crds::validate::self_loops(spec).into_iter().next() {
            let message = found.message();
            let detail = message.strip_prefix(&format!("{} ", found.field)).unwrap_or(&message);
            return Err(Error::config(found.field.clone(), detail.to_owned()));
        }
        // `spec.filter`: an expression that would fail on every message is refused at start.
        if let Some(found) = sluice_crds::validate::filter::check(spec) {
            return Err(Error::config(found.path, found.message));
        }
        let queues = spec.queues.iter().enumerate().map(queue).collect::<Result<Vec<_>>>()?;
        let receive = receive(spec)?;
        let rate = rate(spec)?;
        let checkpoint_interval = match (spec.delivery.guarantee, spec.delivery.checkpoint_interval_seconds) {
            (_, Some(s)) if !(1..=3600).contains(&s) => {
                return Err(Error::config("spec.delivery.checkpointIntervalSeconds", "must be 1-3600"));
            }
            (Guarantee::ExactlyOnce, None) => {
                return Err(Error::config(
                    "spec.delivery.checkpointIntervalSeconds",
                    "is required with guarantee exactlyOnce",
                ));
            }
            (_, s) => s.map(|s| Duration::from_secs(s as u64)),
        };
        Ok(Self {
            source_name,
            queues,
            receive,
            rate,
            guarantee: spec.delivery.guarantee,
            checkpoint_interval,
            fail_on_error: spec.delivery.fail_on_error,
            payload: spec.payload.format,
            credentials: credentials(spec)?,
            spec: spec.clone(),
        })
    }

    /// How many of the pod's pollers each queue gets (same order as `queues`).
    pub fn pollers_per_queue(&self) -> Vec<usize> {
        let weights: Vec<u32> = self.queues.iter().map(|q| q.weight).collect();
        spread(self.receive.pollers, &weights)
    }
}

fn queue((index, q): (usize, &sluice_crds::QueueRef)) -> Result<QueueSettings> {
    let at = format!("spec.queues[{index}]");
    if q.weight == 0 {
        return Err(Error::config(format!("{at}.weight"), "must be at least 1"));
    }
    if let Some(endpoint) = &q.endpoint {
        let ok = reqwest::Url::parse(endpoint).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
        if !ok {
            return Err(Error::config(
                format!("{at}.endpoint"),
                format!("{endpoint:?} is not an http(s) URL"),
            ));
        }
    }
    let location = match (&q.url, &q.name) {
        (Some(url), None) => {
            QueueLocation::Url(QueueUrl::parse(url).map_err(|m| Error::config(format!("{at}.url"), m))?)
        }
        (None, Some(name)) if !name.is_empty() => QueueLocation::Name(name.clone()),
        (None, Some(_)) => return Err(Error::config(format!("{at}.name"), "must not be empty")),
        _ => return Err(Error::config(at, "set exactly one of url or name")),
    };
    let (region, fifo) = match &location {
        QueueLocation::Url(u) => (q.region.clone().or_else(|| u.region.clone()), u.is_fifo()),
        QueueLocation::Name(n) => (q.region.clone(), n.ends_with(".fifo")),
    };
    Ok(QueueSettings { index, location, region, endpoint: q.endpoint.clone(), weight: q.weight, fifo })
}

fn receive(spec: &SqsSourceSpec) -> Result<ReceiveSettings> {
    let r = &spec.receive;
    if !(1..=10).contains(&r.max_messages) {
        return Err(Error::config("spec.receive.maxMessages", "must be 1-10"));
    }
    if !(0..=20).contains(&r.wait_time_seconds) {
        return Err(Error::config("spec.receive.waitTimeSeconds", "must be 0-20"));
    }
    if let Some(v) = r.visibility_timeout_seconds
        && !(0..=43_200).contains(&v)
    {
        return Err(Error::config("spec.receive.visibilityTimeoutSeconds", "must be 0-43200"));
    }
    if !(1..=64).contains(&r.pollers) {
        return Err(Error::config("spec.receive.pollers", "must be 1-64"));
    }
    if (r.pollers as usize) < spec.queues.len() {
        return Err(Error::config("spec.receive.pollers", "must be at least the number of queues"));
    }
    let window = r.batch_window_milliseconds.unwrap_or(0);
    if window > 20_000 {
        return Err(Error::config("spec.receive.batchWindowMilliseconds", "must be 0-20000"));
    }
    Ok(ReceiveSettings {
        max_messages: r.max_messages,
        wait_time_seconds: r.wait_time_seconds,
        visibility_timeout_seconds: r.visibility_timeout_seconds,
        pollers: r.pollers as usize,
        attribute_names: r.attribute_names.clone(),
        message_attribute_names: r.message_attribute_names.clone(),
        held: held(&r.held)?,
        batch_window: Duration::from_millis(u64::from(window)),
    })
}

fn held(h: &sluice_crds::HeldSpec) -> Result<HeldSettings> {
    if !(1..=100_000).contains(&h.max_messages) {
        return Err(Error::config("spec.receive.held.maxMessages", "must be 1-100000"));
    }
    if !(1024..=4_294_967_296).contains(&h.max_bytes) {
        return Err(Error::config("spec.receive.held.maxBytes", "must be 1024-4294967296 (4 GiB)"));
    }
    if !(100..=60_000).contains(&h.horizon_milliseconds) {
        return Err(Error::config("spec.receive.held.horizonMilliseconds", "must be 100-60000"));
    }
    Ok(HeldSettings {
        max_messages: h.max_messages as usize,
        max_bytes: h.max_bytes,
        horizon: Duration::from_millis(u64::from(h.horizon_milliseconds)),
    })
}

fn rate(spec: &SqsSourceSpec) -> Result<RateSettings> {
    let Some(r) = &spec.rate_limit else {
        return Ok(RateSettings { burst_seconds: 1, ..Default::default() });
    };
    if r.messages_per_second == Some(0) {
        return Err(Error::config(
            "spec.rateLimit.messagesPerSecond",
            "must be at least 1 (omit it for no limit)",
        ));
    }
    if r.bytes_per_second == Some(0) {
        return Err(Error::config(
            "spec.rateLimit.bytesPerSecond",
            "must be at least 1 (omit it for no limit)",
        ));
    }
    let burst_seconds = r.burst_seconds.unwrap_or(1);
    if burst_seconds == 0 {
        return Err(Error::config("spec.rateLimit.burstSeconds", "must be at least 1"));
    }
    Ok(RateSettings {
        messages_per_second: r.messages_per_second,
        bytes_per_second: r.bytes_per_second,
        burst_seconds,
    })
}

fn credentials(spec: &SqsSourceSpec) -> Result<CredentialSettings> {
    let c = &spec.credentials;
    match c.source {
        CredentialSource::DefaultChain | CredentialSource::Secret => Ok(CredentialSettings::DefaultChain),
        CredentialSource::AssumeRole => match &c.role_arn {
            Some(arn) if arn.starts_with("arn:") => Ok(CredentialSettings::AssumeRole {
                role_arn: arn.clone(),
                external_id: c.external_id.clone(),
                session_name: c.session_name.clone(),
            }),
            Some(arn) => Err(Error::config("spec.credentials.roleArn", format!("{arn:?} is not an ARN"))),
            None => Err(Error::config("spec.credentials.roleArn", "is required with source AssumeRole")),
        },
    }
}

/// Split `total` pollers over queues in proportion to `weights`, at least one each (largest
/// remainder, ties to the earlier queue). `total` must be at least `weights.len()`.
pub fn spread(total: usize, weights: &[u32]) -> Vec<usize> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let spare = total.saturating_sub(n) as u64;
    let sum: u64 = weights.iter().map(|w| u64::from(*w)).sum::<u64>().max(1);
    let mut counts: Vec<usize> = weights.iter().map(|w| 1 + (spare * u64::from(*w) / sum) as usize).collect();
    let mut left = total.saturating_sub(counts.iter().sum());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((spare * u64::from(weights[i])) % sum));
    for i in order.into_iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> SqsSourceSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    const MINIMAL: &str = "queues: [{url: 'http://127.0.0.1:4566/queue/us-east-1/000000000000/src'}]\nsinks: [{name: out, log: {}}]\n";

    #[test]
    fn defaults_come_through() {
        let s = Settings::from_spec("demo".into(), &spec(MINIMAL)).unwrap();
        assert_eq!(s.receive.max_messages, 10);
        assert_eq!(s.receive.wait_time_seconds, 20);
        assert_eq!(s.receive.pollers, 4);
        assert_eq!(s.queues[0].region.as_deref(), Some("us-east-1"));
        assert!(!s.queues[0].fifo);
        assert_eq!(
            s.rate,
            RateSettings { messages_per_second: None, bytes_per_second: None, burst_seconds: 1 }
        );
        assert_eq!(s.credentials, CredentialSettings::DefaultChain);
        assert_eq!(s.pollers_per_queue(), vec![4]);
        assert_eq!(
            s.receive.held,
            HeldSettings { max_messages: 1000, max_bytes: 64 << 20, horizon: Duration::from_secs(2) }
        );
    }

    fn field_of(yaml: &str) -> String {
        match Settings::from_spec("x".into(), &spec(yaml)) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field_of("queues: [{url: 'nope'}]\nsinks: []"), "spec.queues[0].url");
        assert_eq!(field_of("queues: []\nsinks: []"), "spec.queues");
        let q = "queues: [{url: 'http://h/1/q'}]\nsinks: []\n";
        assert_eq!(field_of(&format!("{q}receive: {{maxMessages: 11}}")), "spec.receive.maxMessages");
        assert_eq!(field_of(&format!("{q}receive: {{waitTimeSeconds: 21}}")), "spec.receive.waitTimeSeconds");
        assert_eq!(field_of(&format!("{q}receive: {{pollers: 0}}")), "spec.receive.pollers");
        assert_eq!(
            field_of(&format!("{q}receive: {{held: {{horizonMilliseconds: 50}}}}")),
            "spec.receive.held.horizonMilliseconds"
        );
        assert_eq!(
            field_of(&format!("{q}rateLimit: {{messagesPerSecond: 0}}")),
            "spec.rateLimit.messagesPerSecond"
        );
        assert_eq!(
            field_of(&format!("{q}delivery: {{guarantee: exactlyOnce}}")),
            "spec.delivery.checkpointIntervalSeconds"
        );
        assert_eq!(field_of(&format!("{q}credentials: {{source: AssumeRole}}")), "spec.credentials.roleArn");
        assert_eq!(
            field_of("queues: [{url: 'http://h/1/q', endpoint: 'x'}]\nsinks: []"),
            "spec.queues[0].endpoint"
        );
        assert_eq!(field_of("queues: [{url: 'http://h/1/q', name: q}]\nsinks: []"), "spec.queues[0]");
        assert_eq!(
            field_of("queues: [{url: 'http://h/1/q', weight: 0}]\nsinks: []"),
            "spec.queues[0].weight"
        );
    }

    #[test]
    fn a_sink_that_is_a_source_queue_is_refused_naming_the_sink() {
        let own = "http://127.0.0.1:4566/queue/us-east-1/000000000000/orders";
        let yaml = format!(
            "queues: [{{url: '{own}'}}]\nsinks: [{{name: s, log: {{}}}}]\n\
             deadLetterSink: {{name: d, sqs: {{queueUrl: '{own}'}}}}"
        );
        let Err(Error::Config { field, message }) = Settings::from_spec("x".into(), &spec(&yaml)) else {
            panic!("a dead-letter sink into the source's own queue must be refused");
        };
        assert_eq!(field, "spec.deadLetterSink.sqs.queueUrl");
        assert!(message.contains("queue orders of this source (spec.queues[0])"), "{message}");
    }

    #[test]
    fn named_queues_and_fifo_are_recognised() {
        let s = Settings::from_spec(
            "x".into(),
            &spec("queues: [{name: jobs.fifo, region: eu-west-1}, {url: 'http://h/q/1/a.fifo'}]\nsinks: []"),
        )
        .unwrap();
        assert_eq!(s.queues[0].location, QueueLocation::Name("jobs.fifo".into()));
        assert!(s.queues[0].fifo && s.queues[1].fifo);
        assert_eq!(s.queues[0].region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn pollers_spread_by_weight_with_one_each() {
        assert_eq!(spread(4, &[1]), vec![4]);
        assert_eq!(spread(4, &[1, 1]), vec![2, 2]);
        assert_eq!(spread(10, &[3, 1]), vec![7, 3]);
        assert_eq!(spread(3, &[100, 1, 1]), vec![1, 1, 1]);
        assert_eq!(spread(5, &[1, 1]), vec![3, 2]);
        for total in 3..40 {
            let counts = spread(total, &[5, 2, 1]);
            assert_eq!(counts.iter().sum::<usize>(), total);
            assert!(counts.iter().all(|c| *c >= 1));
            assert!(counts[0] >= counts[1] && counts[1] >= counts[2], "{counts:?}");
        }
    }
}
