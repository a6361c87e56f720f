//! Which of a queue's messages this source takes, and what becomes of the others.
//!
//! Why a fate the user must name: teams share one queue between consumers that want different
//! messages. Lambda's filter criteria delete what does not match without saying so, which its users
//! find out by losing messages; here a source states `delete`, `release` or `route`, and every
//! fate is counted. The expression is checked when the manifest is applied (`validate::filter`:
//! it must parse and name only the variables below), by the operator (a condition), and by the
//! reader at start (exit 2 naming the field). docs/filter.md has examples and each fate's caveats.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Takes only the messages a CEL expression matches; `onMismatch` says what happens to the rest.
/// The expression sees `attributes` (message attributes, name to string: Number attributes as
/// their decimal text, Binary ones base64), `system` (system attributes as SQS returns them, name
/// to string: `SentTimestamp` in ms, `ApproximateReceiveCount`, `MessageGroupId`, ...),
/// `messageId`, and `body`: the body parsed when it is JSON (whatever `spec.payload.format`),
/// else the body as one string (`body.startsWith('x')` works; a field of a string reads as
/// false, so `body.region == 'eu'` is a mismatch on a non-JSON body). The body is the message as received: an S3 notification or an
/// Extended Client pointer, not the object it names (no object is fetched for a message the
/// filter turns away). An expression that gives `false` is a mismatch; one that fails on a
/// message (a missing key, a wrong type) or gives anything but a bool is an error, by default the
/// message's fault (`onError`, default `deadLetter`), counted in `sluice_reader_filter_errors_total`.
/// Example: `{expression: "attributes.tenant == 'acme' && has(body.order) && body.order.total >
/// 100", onMismatch: route, routeTo: others}`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.onMismatch == 'route' ? has(self.routeTo) : !has(self.routeTo)")
        .field_path(".routeTo")
        .message("spec.filter.routeTo names the sink for onMismatch: route, and only for it: set both or neither"),
    validation = Rule::new("!has(self.releaseDelaySeconds) || self.onMismatch == 'release'")
        .field_path(".releaseDelaySeconds")
        .message("spec.filter.releaseDelaySeconds applies only to onMismatch: release: remove it or set onMismatch: release"),
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FilterSpec {
    /// A CEL expression, 1-4096 characters, over `attributes`, `system`, `messageId` and `body`;
    /// a message matches when it gives `true`. Example: `attributes.kind == 'order' &&
    /// body.region == 'eu'`. Required.
    #[schemars(length(min = 1, max = 4096))]
    pub expression: String,
    /// What happens to a message that does not match: `delete` (deleted from the queue unseen by
    /// any sink, counted), `release` (made visible again for another consumer, after
    /// `releaseDelaySeconds` or the reader's redelivery delay, whichever is longer: each release
    /// costs the message a receive, so on a queue with a RedrivePolicy a message no consumer takes
    /// ends in its dead-letter queue), or `route` (delivered to the sink `routeTo` only, with that
    /// sink's retries and hold). Required.
    pub on_mismatch: FilterFate,
    /// With `onMismatch: route`: the name of the sink in `spec.sinks` that takes every message
    /// the expression does not match. That sink then takes only those: a matching message skips
    /// it whatever its `route`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub route_to: Option<String>,
    /// With `onMismatch: release`: seconds, 0-43200, before a released message is visible again.
    /// The reader's redelivery delay (1 s on the first receive, doubling with each receive to
    /// 300 s) applies when longer, so a message no reader wants never spins between receives.
    /// Default 0 (the redelivery delay alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 43200))]
    pub release_delay_seconds: Option<u32>,
    /// What happens to a message the expression fails on (a missing key: guard it with `has()`; a
    /// wrong type): `deadLetter` (the message's fault: it takes the dead-letter route with a reason
    /// naming the expression and the error, or, with no `deadLetterSink`, goes back to the queue
    /// with the visibility delay that grows with its receive count, as a rejected message does),
    /// or `mismatch` (it meets the `onMismatch` fate, so with `delete` a typo deletes every
    /// message it fails on). Default `deadLetter`.
    #[serde(default)]
    pub on_error: FilterErrorFate,
}

/// The fate of a message `spec.filter.expression` fails on.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FilterErrorFate {
    /// The dead-letter route, with the expression and the error as the reason.
    #[default]
    DeadLetter,
    /// The fate of a mismatch (`onMismatch`).
    Mismatch,
}

/// The fate of a message the filter does not match.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FilterFate {
    /// Delete it from the queue (counted, never delivered).
    Delete,
    /// Make it visible again for another consumer.
    Release,
    /// Deliver it to the sink `routeTo` only.
    Route,
}

impl FilterFate {
    /// The spelling in the spec, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterFate::Delete => "delete",
            FilterFate::Release => "release",
            FilterFate::Route => "route",
        }
    }
}
