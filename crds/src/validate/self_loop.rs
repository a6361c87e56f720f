//! A sink or dead-letter sink that is one of the source's own queues.
//!
//! Why refuse it: a message forwarded there lands back in the queue the readers receive from, is
//! forwarded again, and again: hundreds of billed copies a second, none delivered anywhere. The
//! CRD's CEL rules catch the plain case (the same URL on both sides). This check also catches the
//! forms CEL cannot compare: a queue given by name and region against a sink URL, and URLs that
//! spell one queue differently (AWS's legacy hosts, LocalStack's path and host styles, a
//! trailing slash). The operator reports each finding as a problem with its field, and the
//! reader can refuse to start on it, from this one function.
//!
//! Two references are the same queue when the names are equal, the regions agree (a region that
//! cannot be known from the spec agrees with any), the accounts agree (likewise: a queue given by
//! name has no account until GetQueueUrl), and both are reached through the same endpoint
//! override (none meaning AWS): two LocalStacks, or LocalStack and AWS, are different services.

use crate::queue::{queue_name_from_url, region_from_queue_url};
use crate::{QueueRef, SinkSpec, SqsSourceSpec};

/// One sink that points at one of the source's queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfLoop {
    /// The sink's field, e.g. `spec.sinks[1].sqs.queueUrl` or `spec.deadLetterSink.sqs.queueUrl`.
    pub field: String,
    /// The queue it points at, e.g. `spec.queues[0]`.
    pub queue_field: String,
    /// The queue's name, for messages.
    pub queue_name: String,
}

impl SelfLoop {
    /// One line for a condition, an event or a reader's exit: what, where, and what to do.
    pub fn message(&self) -> String {
        format!(
            "{} is queue {} of this source ({}): every forwarded message would be received and forwarded again without end; point the sink at another queue",
            self.field, self.queue_name, self.queue_field
        )
    }
}

/// Where a queue is, as far as the spec tells.
struct Place<'a> {
    name: &'a str,
    region: Option<String>,
    account: Option<&'a str>,
    endpoint: Option<String>,
}

impl Place<'_> {
    fn same_as(&self, other: &Place<'_>) -> bool {
        fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        self.name == other.name
            && agree(&self.region, &other.region)
            && agree(&self.account, &other.account)
            && self.endpoint == other.endpoint
    }
}

/// The account id in a queue URL: the path segment before the name, when it is all digits.
fn account_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (_, path) = rest.split_once('/')?;
    let mut segments = path.trim_end_matches('/').rsplit('/');
    segments.next();
    segments.next().filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
}

fn endpoint(e: Option<&String>) -> Option<String> {
    e.map(|e| e.trim_end_matches('/').to_ascii_lowercase())
}

fn source_place(queue: &QueueRef) -> Option<Place<'_>> {
    Some(Place {
        name: queue.queue_name()?,
        region: queue.region(),
        account: queue.url.as_deref().and_then(account_of),
        endpoint: endpoint(queue.endpoint.as_ref()),
    })
}

fn sink_place(sink: &SinkSpec) -> Option<Place<'_>> {
    let sqs = sink.sqs.as_ref()?;
    Some(Place {
        name: queue_name_from_url(&sqs.queue_url)?,
        region: sqs.region.clone().or_else(|| region_from_queue_url(&sqs.queue_url)),
        account: account_of(&sqs.queue_url),
        endpoint: endpoint(sqs.endpoint.as_ref()),
    })
}

/// Every sqs sink (dead-letter sink included) that is one of `spec.queues`.
pub fn self_loops(spec: &SqsSourceSpec) -> Vec<SelfLoop> {
    let sinks = spec
        .sinks
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("spec.sinks[{i}].sqs.queueUrl"), s))
        .chain(spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink.sqs.queueUrl".to_owned(), s)));
    let mut found = Vec::new();
    for (field, sink) in sinks {
        let Some(target) = sink_place(sink) else { continue };
        let hit = spec
            .queues
            .iter()
            .enumerate()
            .find(|(_, q)| source_place(q).is_some_and(|place| place.same_as(&target)));
        if let Some((index, _)) = hit {
            found.push(SelfLoop {
                field,
                queue_field: format!("spec.queues[{index}]"),
                queue_name: target.name.to_owned(),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(queue: serde_json::Value, sink_url: &str, sink_extra: serde_json::Value) -> SqsSourceSpec {
        let mut sqs = serde_json::json!({ "queueUrl": sink_url });
        if let (Some(m), Some(extra)) = (sqs.as_object_mut(), sink_extra.as_object()) {
            m.extend(extra.clone());
        }
        serde_json::from_value(serde_json::json!({
            "queues": [queue],
            "sinks": [{ "name": "log", "log": {} }, { "name": "forward", "sqs": sqs.clone() }],
            "deadLetterSink": { "name": "dead", "sqs": sqs },
        }))
        .expect("a valid spec")
    }

    fn fields(spec: &SqsSourceSpec) -> Vec<String> {
        self_loops(spec).into_iter().map(|l| l.field).collect()
    }

    const BOTH: [&str; 2] = ["spec.sinks[1].sqs.queueUrl", "spec.deadLetterSink.sqs.queueUrl"];

    #[test]
    fn every_spelling_of_the_source_queue_is_a_loop() {
        let none = serde_json::json!({});
        let aws = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
        let cases = [
            ("same url", serde_json::json!({ "url": aws }), aws, none.clone()),
            (
                "name and region",
                serde_json::json!({ "name": "orders", "region": "us-east-1" }),
                aws,
                none.clone(),
            ),
            (
                "legacy host, trailing slash",
                serde_json::json!({ "url": aws }),
                "https://queue.amazonaws.com/123456789012/orders/",
                none.clone(),
            ),
            (
                "LocalStack path and host styles, same endpoint",
                serde_json::json!({ "url": "http://127.0.0.1:4566/queue/us-east-1/000000000000/orders", "endpoint": "http://127.0.0.1:4566" }),
                "http://sqs.us-east-1.localhost.localstack.cloud:4566/000000000000/orders",
                serde_json::json!({ "endpoint": "http://127.0.0.1:4566/" }),
            ),
        ];
        for (case, queue, url, extra) in cases {
            let spec = spec(queue, url, extra);
            assert_eq!(fields(&spec), BOTH, "{case}");
            let message = self_loops(&spec)[0].message();
            assert!(
                message.starts_with(
                    "spec.sinks[1].sqs.queueUrl is queue orders of this source (spec.queues[0])"
                ),
                "{message}"
            );
        }
    }

    #[test]
    fn other_queues_regions_accounts_and_endpoints_are_not() {
        let none = serde_json::json!({});
        let aws = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
        let cases = [
            (
                "another name",
                serde_json::json!({ "url": aws }),
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders-out",
                none.clone(),
            ),
            (
                "another region",
                serde_json::json!({ "name": "orders", "region": "eu-west-1" }),
                aws,
                none.clone(),
            ),
            (
                "another account",
                serde_json::json!({ "url": aws }),
                "https://sqs.us-east-1.amazonaws.com/210987654321/orders",
                none.clone(),
            ),
            (
                "LocalStack source, AWS sink",
                serde_json::json!({ "url": aws, "endpoint": "http://127.0.0.1:4566" }),
                aws,
                none.clone(),
            ),
            (
                "FIFO twin",
                serde_json::json!({ "url": aws }),
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
                none,
            ),
        ];
        for (case, queue, url, extra) in cases {
            assert!(fields(&spec(queue, url, extra)).is_empty(), "{case}");
        }
    }
}
