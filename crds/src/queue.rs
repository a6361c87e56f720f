//! Facts about a queue that follow from its spec alone, without calling AWS.
//!
//! The operator, the reader and the tests all need "is it FIFO?", "which region?" and "what is
//! its URL?"; answering them here keeps the three from drifting apart. A queue given by name has
//! no URL until `GetQueueUrl` answers (the URL holds the account id), so [`QueueRef::resolved_url`]
//! is `None` there and callers resolve `queue_name()` in `region()` at `endpoint`.

use crate::{QueueRef, SqsSinkSpec};

impl QueueRef {
    /// The queue name: `name`, or the last path segment of `url`.
    pub fn queue_name(&self) -> Option<&str> {
        match (&self.name, &self.url) {
            (Some(name), _) => Some(name),
            (None, Some(url)) => queue_name_from_url(url),
            (None, None) => None,
        }
    }

    /// FIFO queues are the ones whose name ends in `.fifo` (an SQS naming rule).
    pub fn is_fifo(&self) -> bool {
        self.queue_name().is_some_and(|n| n.ends_with(".fifo"))
    }

    /// The queue URL when it is known without calling AWS (the `url` field); `None` for a queue
    /// given by name, which must be resolved with GetQueueUrl.
    pub fn resolved_url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// The region to call: `region` if set, else the one in `url`.
    pub fn region(&self) -> Option<String> {
        self.region.clone().or_else(|| self.url.as_deref().and_then(region_from_queue_url))
    }
}

impl SqsSinkSpec {
    /// Whether the target queue is FIFO (its URL ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        queue_name_from_url(&self.queue_url).is_some_and(|n| n.ends_with(".fifo"))
    }

    /// The region to call: `region` if set, else the one in `queueUrl`.
    pub fn resolved_region(&self) -> Option<String> {
        self.region.clone().or_else(|| region_from_queue_url(&self.queue_url))
    }
}

/// The last path segment of a queue URL, i.e. the queue name.
pub fn queue_name_from_url(url: &str) -> Option<&str> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (_, path) = path.split_once('/')?;
    path.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty())
}

/// The region named in a queue URL, for the forms AWS and LocalStack use:
/// `https://sqs.REGION.amazonaws.com/...`, `https://REGION.queue.amazonaws.com/...`,
/// `https://queue.amazonaws.com/...` (us-east-1), `http://sqs.REGION.localhost.localstack.cloud:4566/...`
/// and LocalStack's path style `http://HOST/queue/REGION/ACCOUNT/NAME`.
pub fn region_from_queue_url(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let labels: Vec<&str> = host.split('.').collect();
    let from_host = match labels.as_slice() {
        ["sqs", region, ..] if looks_like_region(region) => Some(*region),
        [region, "queue", ..] if looks_like_region(region) => Some(*region),
        ["queue", "amazonaws", "com"] => Some("us-east-1"),
        _ => None,
    };
    let segments: Vec<&str> = path.split('/').collect();
    let from_path = match segments.as_slice() {
        ["queue", region, _account, _name] if looks_like_region(region) => Some(*region),
        _ => None,
    };
    from_host.or(from_path).map(str::to_owned)
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`: two letters, words, a number.
fn looks_like_region(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].chars().all(|c| c.is_ascii_lowercase())
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts.last().is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_url(url: &str) -> QueueRef {
        QueueRef { url: Some(url.into()), name: None, region: None, endpoint: None, weight: 1 }
    }

    #[test]
    fn regions_come_from_every_url_form() {
        let cases = [
            ("https://sqs.eu-west-2.amazonaws.com/123456789012/q", Some("eu-west-2")),
            ("https://us-gov-west-1.queue.amazonaws.com/123456789012/q", Some("us-gov-west-1")),
            ("https://queue.amazonaws.com/123456789012/q", Some("us-east-1")),
            ("http://sqs.ap-south-1.localhost.localstack.cloud:4566/000000000000/q", Some("ap-south-1")),
            ("http://127.0.0.1:4566/queue/us-east-1/000000000000/q", Some("us-east-1")),
            ("http://127.0.0.1:4566/000000000000/q", None),
        ];
        for (url, want) in cases {
            assert_eq!(region_from_queue_url(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn explicit_region_wins_over_the_url() {
        let mut q = by_url("https://sqs.eu-west-2.amazonaws.com/123456789012/q");
        q.region = Some("us-west-1".into());
        assert_eq!(q.region().as_deref(), Some("us-west-1"));
    }

    #[test]
    fn fifo_follows_the_name_or_the_url() {
        assert!(by_url("http://127.0.0.1:4566/queue/us-east-1/000000000000/a.fifo").is_fifo());
        assert!(!by_url("http://127.0.0.1:4566/queue/us-east-1/000000000000/a").is_fifo());
        let named =
            QueueRef { url: None, name: Some("b.fifo".into()), region: None, endpoint: None, weight: 1 };
        assert!(named.is_fifo());
        assert_eq!(named.queue_name(), Some("b.fifo"));
        assert_eq!(named.resolved_url(), None, "a named queue needs GetQueueUrl");
    }

    #[test]
    fn queue_names_are_the_last_segment() {
        assert_eq!(queue_name_from_url("https://sqs.us-east-1.amazonaws.com/1/orders/"), Some("orders"));
        assert_eq!(queue_name_from_url("http://127.0.0.1:4566"), None);
    }

    #[test]
    fn sqs_sinks_know_fifo_and_region() {
        let sink = SqsSinkSpec {
            queue_url: "https://sqs.us-east-2.amazonaws.com/1/out.fifo".into(),
            endpoint: None,
            region: None,
            message_group_id: None,
            offload: None,
        };
        assert!(sink.is_fifo());
        assert_eq!(sink.resolved_region().as_deref(), Some("us-east-2"));
    }
}
