//! A request to send the source's dead letters back through it.
//!
//! Why declarative: after an incident is fixed, "replay what was dead-lettered" belongs in the
//! same GitOps repository as the source, rate-limited to what the sink takes and recorded in the
//! status. The operator acts once per `id`: a request that completed stays completed, and a new
//! `id` is a new request. Which queue is replayed, how a message is never replayed twice for one
//! request, and why the operator moves messages itself rather than with SQS's
//! StartMessageMoveTask is said in docs/replay.md.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Moves messages from the source's dead-letter queue back to the queue they came from, at a
/// bounded rate. The dead-letter queue is `spec.deadLetterSink.sqs.queueUrl` when the source has
/// an sqs dead-letter sink, else the dead-letter queue of the first queue's RedrivePolicy.
/// Example: `{id: after-incident-42, ratePerSecond: 50, reasonContains: "HTTP 400"}`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.deadLetteredAfter) || !has(self.deadLetteredBefore) || self.deadLetteredAfter < self.deadLetteredBefore")
    .field_path(".deadLetteredAfter")
    .message("spec.replay.deadLetteredAfter must be earlier than spec.replay.deadLetteredBefore: swap them or widen the window"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplaySpec {
    /// Names this request, 1-63 lowercase letters, digits and '-'. The operator replays once per
    /// id (progress in `status.replay`); change it to replay again. Required.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("spec.replay.id must be lowercase letters, digits and '-', starting and ending with a letter or digit: rename it"))]
    pub id: String,
    /// Messages moved per second, 1-1000, so the sink is not flooded. Default 10.
    #[serde(default = "default_rate_per_second")]
    #[schemars(range(min = 1, max = 1000))]
    pub rate_per_second: u32,
    /// Replay only messages dead-lettered at or after this time (RFC 3339 in UTC, e.g.
    /// `2026-12-02T13:00:00Z`): the dead-letter queue's `SentTimestamp`. Absent: no lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 40))]
    #[x_kube(validation = Rule::new(r"self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$')")
        .message("spec.replay.deadLetteredAfter is not an RFC 3339 time in UTC: write it as 2026-12-02T13:00:00Z"))]
    pub dead_lettered_after: Option<String>,
    /// Replay only messages dead-lettered before this time (RFC 3339 in UTC). Absent: no upper
    /// bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 40))]
    #[x_kube(validation = Rule::new(r"self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$')")
        .message("spec.replay.deadLetteredBefore is not an RFC 3339 time in UTC: write it as 2026-12-02T14:00:00Z"))]
    pub dead_lettered_before: Option<String>,
    /// Replay only messages whose dead-letter reason (`sluice-dlq-reason`, or `reason` in
    /// `sluice-dead-letter`) contains this text, 1-256 characters, e.g. `HTTP 400`. A message
    /// without a reason attribute does not match. Absent: every reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason_contains: Option<String>,
}

fn default_rate_per_second() -> u32 {
    10
}
