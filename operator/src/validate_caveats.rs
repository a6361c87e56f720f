//! Settings that work but quietly weaken what a user may expect: said out loud, not refused.
//!
//! Why warn rather than reject: each has a legitimate use, yet none is what most people mean.
//! - exactlyOnce through an http sink: a reader that restarts mid-epoch POSTs the epoch's
//!   messages again; only a receiver that drops repeated `ce-id`s (the SQS MessageId) ends up
//!   with each message once.
//! - A FIFO source forwarded to a standard queue: the target neither keeps the order nor
//!   deduplicates, so what the FIFO queue promised is lost on the way.
//! - Plain http to a host that is not local: message bodies (and any AWS traffic through an
//!   endpoint override) cross the network unencrypted.
//!
//! Pure, so each case is a table row; the reconciler turns the list into the `SpecWarnings`
//! condition and a Warning Event when it appears.

use sluice_crds::{Guarantee, SinkSpec, SqsSourceSpec};

/// One weakened expectation: a PascalCase reason, the field, and what it means and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caveat {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

/// Every caveat of `spec`, sinks first, in field order.
pub fn caveats(spec: &SqsSourceSpec) -> Vec<Caveat> {
    let mut out = Vec::new();
    let fifo_source = !spec.queues.is_empty() && spec.queues.iter().all(|q| q.is_fifo());
    let sinks = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let dead = spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s));
    for (field, sink) in sinks.clone() {
        if let Some(http) = &sink.http
            && spec.delivery.guarantee == Guarantee::ExactlyOnce
        {
            out.push(Caveat {
                reason: "HttpSinkMustDeduplicate",
                field: format!("{field}.http"),
                message: format!(
                    "{field} ({}) is an http sink under exactlyOnce: after a reader restart a message can be POSTed again, so the receiver at {} must drop repeated ce-id values (the SQS MessageId) for each message to count once",
                    sink.name,
                    host_of(&http.url).unwrap_or("its url")
                ),
            });
        }
        if let Some(sqs) = &sink.sqs
            && fifo_source
            && !sqs.is_fifo()
        {
            out.push(Caveat {
                reason: "FifoOrderLost",
                field: format!("{field}.sqs.queueUrl"),
                message: format!(
                    "{field}.sqs.queueUrl is a standard queue but spec.queues are FIFO: forwarded messages lose their order and deduplication; forward to a queue whose name ends in .fifo to keep them"
                ),
            });
        }
    }
    let endpoints = spec
        .queues
        .iter()
        .enumerate()
        .filter_map(|(i, q)| q.endpoint.as_ref().map(|e| (format!("spec.queues[{i}].endpoint"), e.as_str())))
        .chain(sinks.chain(dead).flat_map(|(field, sink)| sink_urls(&field, sink)));
    for (field, url) in endpoints {
        if let Some(host) = url.strip_prefix("http://").map(host_of_rest)
            && !is_local(host)
        {
            out.push(Caveat {
                reason: "PlainHttpEndpoint",
                field: field.clone(),
                message: format!(
                    "{field} sends to {host} over plain http: messages cross the network unencrypted; use https, or keep plain http to local or in-cluster hosts"
                ),
            });
        }
    }
    out
}

/// The URLs a sink sends to, with their fields.
fn sink_urls<'a>(field: &str, sink: &'a SinkSpec) -> Vec<(String, &'a str)> {
    let mut urls = Vec::new();
    if let Some(http) = &sink.http {
        urls.push((format!("{field}.http.url"), http.url.as_str()));
    }
    if let Some(endpoint) = sink.sqs.as_ref().and_then(|s| s.endpoint.as_deref()) {
        urls.push((format!("{field}.sqs.endpoint"), endpoint));
    }
    if let Some(endpoint) = sink.s3.as_ref().and_then(|s| s.endpoint.as_deref()) {
        urls.push((format!("{field}.s3.endpoint"), endpoint));
    }
    urls
}

fn host_of(url: &str) -> Option<&str> {
    url.split_once("://").map(|(_, rest)| host_of_rest(rest))
}

/// The host of `host[:port][/path]` (IPv6 literals keep their brackets).
fn host_of_rest(rest: &str) -> &str {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if authority.starts_with('[') {
        return authority.split_once(']').map_or(authority, |(h, _)| h).trim_start_matches('[');
    }
    authority.split(':').next().unwrap_or_default()
}

/// Loopback, `localhost`, and in-cluster names (one label, `.svc`, `.cluster.local`): traffic that
/// stays on the node or inside the cluster.
fn is_local(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    host == "localhost"
        || host.ends_with(".localhost")
        || !host.contains('.')
        || host.ends_with(".svc")
        || host.ends_with(".cluster.local")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn reasons(spec: &SqsSourceSpec) -> Vec<(&'static str, String)> {
        caveats(spec).into_iter().map(|c| (c.reason, c.field)).collect()
    }

    fn sink(json: serde_json::Value) -> SinkSpec {
        serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_fixtures_have_no_caveat() {
        for yaml in [fixtures::BASIC, fixtures::ASSUME_ROLE] {
            assert_eq!(reasons(&fixtures::source(yaml).spec), vec![], "{yaml}");
        }
    }

    #[test]
    fn exactly_once_through_http_says_the_receiver_must_deduplicate() {
        let mut spec = fixtures::source(fixtures::EXACTLY_ONCE_SECRET).spec;
        spec.sinks =
            vec![sink(serde_json::json!({"name": "hook", "http": {"url": "https://hooks.example.com/in"}}))];
        let got = caveats(&spec);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].reason, got[0].field.as_str()), ("HttpSinkMustDeduplicate", "spec.sinks[0].http"));
        assert!(
            got[0].message.contains("hooks.example.com must drop repeated ce-id values"),
            "{}",
            got[0].message
        );
    }

    #[test]
    fn a_fifo_source_forwarded_to_a_standard_queue_loses_its_order() {
        let mut spec = fixtures::source(fixtures::BASIC).spec;
        spec.queues[0].url = Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo".into());
        spec.sinks.push(sink(serde_json::json!({"name": "copy", "sqs": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/copies"}})));
        spec.sinks.push(sink(serde_json::json!({"name": "keep", "sqs": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/copies.fifo"}})));
        assert_eq!(reasons(&spec), vec![("FifoOrderLost", "spec.sinks[1].sqs.queueUrl".to_owned())]);
    }

    #[test]
    fn plain_http_is_a_caveat_only_off_the_node_and_outside_the_cluster() {
        let mut spec = fixtures::source(fixtures::BASIC).spec;
        let cases = [
            ("http://127.0.0.1:8080/x", false),
            ("http://localhost:8080/x", false),
            ("http://[::1]:8080/x", false),
            ("http://receiver:8080/x", false),
            ("http://receiver.team.svc:8080/x", false),
            ("http://receiver.team.svc.cluster.local/x", false),
            ("https://hooks.example.com/x", false),
            ("http://hooks.example.com/x", true),
            ("http://10.0.3.4:8080/x", true),
            ("http://user@hooks.example.com:80/x", true),
        ];
        for (url, warned) in cases {
            spec.sinks = vec![sink(serde_json::json!({"name": "hook", "http": {"url": url}}))];
            let got = reasons(&spec);
            let want = if warned {
                vec![("PlainHttpEndpoint", "spec.sinks[0].http.url".to_owned())]
            } else {
                vec![]
            };
            assert_eq!(got, want, "{url}");
        }
        spec.sinks = vec![sink(serde_json::json!({"name": "s", "log": {}}))];
        spec.queues[0].endpoint = Some("http://sqs.example.net:4566".into());
        spec.dead_letter_sink = Some(sink(
            serde_json::json!({"name": "dead", "sqs": {"queueUrl": "http://x/1/d", "endpoint": "http://localstack.example.org"}}),
        ));
        assert_eq!(
            reasons(&spec),
            vec![
                ("PlainHttpEndpoint", "spec.queues[0].endpoint".to_owned()),
                ("PlainHttpEndpoint", "spec.deadLetterSink.sqs.endpoint".to_owned())
            ]
        );
    }
}
