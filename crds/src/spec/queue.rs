//! Which SQS queues a source reads.
//!
//! A queue is named either by its full URL (what the AWS console shows) or by name + region, so
//! users can write whichever they have at hand; the rules below keep the two forms from being mixed
//! in one entry and reject URLs the SDK would only fail on at runtime.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// One SQS queue to read: exactly one of `url` or `name` (with `region`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.url) != has(self.name)")
        .message("set exactly one of url or name on each entry of spec.queues: write the full queue url, or name plus region"),
    validation = Rule::new("!has(self.name) || has(self.region)")
        .field_path(".region")
        .message("spec.queues[].region is required when the queue is given by name: add region (e.g. us-east-1) or give the full url instead"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueRef {
    /// Full queue URL, e.g. `https://sqs.us-east-1.amazonaws.com/123456789012/orders` or, on
    /// LocalStack, `http://127.0.0.1:4566/queue/us-east-1/000000000000/orders`. Scheme http or https,
    /// a host, and a last path segment that is the queue name (1-80 letters, digits, `-`, `_`;
    /// FIFO queues end in `.fifo`). Exclusive with `name`. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+/([^?#]*/)?[A-Za-z0-9_-]{1,80}([.]fifo)?$')")
        .message("spec.queues[].url must look like https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (or http://127.0.0.1:4566/queue/REGION/ACCOUNT/NAME on LocalStack): scheme http(s), a host, and the queue name (letters, digits, - or _, optional .fifo) as the last path segment"))]
    pub url: Option<String>,
    /// Queue name (1-80 letters, digits, `-`, `_`; FIFO queues end in `.fifo`); the reader resolves
    /// it to a URL with `GetQueueUrl`-equivalent rules from `region` and `endpoint`. Exclusive with
    /// `url`; requires `region`. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80))]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z0-9_-]{1,75}([.]fifo)?$|^[A-Za-z0-9_-]{1,80}$')")
        .message("spec.queues[].name may hold only letters, digits, - and _ (at most 80 characters, FIFO names end in .fifo): rename it to the queue's exact SQS name"))]
    pub name: Option<String>,
    /// AWS region of the queue, e.g. `us-east-1`. Required with `name`; with `url` it overrides the
    /// region read from the URL. No default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')")
        .message("spec.queues[].region must be an AWS region code such as us-east-1 or eu-west-2: fix the spelling"))]
    pub region: Option<String>,
    /// Endpoint override for the SQS API, e.g. `http://127.0.0.1:4566` for LocalStack: an
    /// http(s) URL without a path. Absent: the AWS endpoint of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(r"self.matches('^https?://[^/?#]+/?$')")
        .message("spec.queues[].endpoint must be an http(s) URL with a host and no path, e.g. http://127.0.0.1:4566: remove the path or fix the scheme"))]
    pub endpoint: Option<String>,
    /// Relative share of the pollers given to this queue when there are several, 1-1000.
    /// Default 1.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1, max = 1000))]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}
