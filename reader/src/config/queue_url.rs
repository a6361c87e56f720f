//! What a queue URL says about its queue: name, region, whether it is FIFO.
//!
//! Why parse it ourselves: a malformed URL must fail at start with the field named, before any
//! request, and the region and FIFO-ness decide how the client is built and how messages are
//! delivered (per-group order), so they are read once here rather than guessed at each use.

use reqwest::Url;

/// A queue URL that has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueUrl {
    pub url: String,
    pub name: String,
    /// From an AWS host (`sqs.<region>.amazonaws.com`) or a LocalStack path (`/queue/<region>/...`).
    pub region: Option<String>,
}

impl QueueUrl {
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text).map_err(|e| format!("{text:?} is not a valid URL: {e}"))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("{text:?} must be an http or https URL"));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("{text:?} has no host"))?;
        let segments: Vec<&str> =
            url.path_segments().map(|s| s.filter(|p| !p.is_empty()).collect()).unwrap_or_default();
        if segments.len() < 2 {
            return Err(format!("{text:?} is not a queue URL (expected .../<account-id>/<queue-name>)"));
        }
        let name = segments[segments.len() - 1].to_owned();
        let region = region_from_host(host).or_else(|| region_from_path(&segments));
        Ok(Self { url: text.to_owned(), name, region })
    }

    /// FIFO queue names end in `.fifo`.
    pub fn is_fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }
}

fn region_from_host(host: &str) -> Option<String> {
    let parts: Vec<&str> = host.split('.').collect();
    match parts.as_slice() {
        ["sqs", region, "amazonaws", ..] => Some((*region).to_owned()),
        [region, "queue", "amazonaws", ..] => Some((*region).to_owned()),
        _ => None,
    }
}

/// LocalStack's path strategy: `/queue/<region>/<account>/<name>`.
fn region_from_path(segments: &[&str]) -> Option<String> {
    match segments {
        ["queue", region, _, _] => Some((*region).to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_urls_give_name_and_region() {
        let q = QueueUrl::parse("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo").unwrap();
        assert_eq!(q.name, "orders.fifo");
        assert_eq!(q.region.as_deref(), Some("eu-west-1"));
        assert!(q.is_fifo());
        let legacy = QueueUrl::parse("https://us-east-2.queue.amazonaws.com/123456789012/jobs").unwrap();
        assert_eq!(legacy.region.as_deref(), Some("us-east-2"));
        assert!(!legacy.is_fifo());
    }

    #[test]
    fn localstack_urls_give_the_region_from_the_path() {
        let q = QueueUrl::parse("http://127.0.0.1:4566/queue/us-east-1/000000000000/src").unwrap();
        assert_eq!((q.name.as_str(), q.region.as_deref()), ("src", Some("us-east-1")));
        let plain = QueueUrl::parse("http://localhost:4566/000000000000/src").unwrap();
        assert_eq!((plain.name.as_str(), plain.region), ("src", None));
    }

    #[test]
    fn malformed_urls_are_refused_with_a_reason() {
        assert!(QueueUrl::parse("not a url").unwrap_err().contains("not a valid URL"));
        assert!(QueueUrl::parse("ftp://host/1/q").unwrap_err().contains("http or https"));
        assert!(QueueUrl::parse("http://host/q").unwrap_err().contains("not a queue URL"));
        assert!(QueueUrl::parse("http://host/").unwrap_err().contains("not a queue URL"));
    }
}
