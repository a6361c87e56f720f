//! What the operator observed and did, written to the status subresource.
//!
//! Field names and types are the contract between the operator (writer) and everything that
//! reads status (printer columns, tests, users). Conditions are a list-map keyed by `type`, so
//! server-side apply merges one condition per field manager instead of replacing the list.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Observed state of an SqsSource, written only by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SqsSourceStatus {
    /// The `metadata.generation` this status describes. Absent until the first reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Current conditions, one per `type`: Ready, QueueReachable, QueueConfigValid, Progressing,
    /// Degraded, Scaling (False with reason FixedReplicas when minReplicas equals maxReplicas),
    /// CheckpointHealthy (True with reason NotApplicable under atLeastOnce), and SpecWarnings (True
    /// while a setting works but weakens what one may expect: exactlyOnce through an http sink,
    /// whose receiver must drop repeated `ce-id`s; a FIFO source forwarded to a standard queue,
    /// which loses the order; plain http to a host that is not local), TargetsReachable (every
    /// sink queue, dead-letter queue and bucket the spec names exists), and SinksHealthy (False
    /// with reason SinkFailing while some reader's deliveries to a sink have failed with no
    /// success for that reader's `--unready-after-seconds` or the sink's circuit is open, naming
    /// the sink, its field and target, and the last error; False with reason
    /// PayloadFetchFailing while some reader holds messages because fetching their payloads from
    /// S3 fails (`spec.payload.s3`), named in the message too when a sink also fails; Unknown
    /// while no reader has reported in the last 90 s; written a few seconds after the readers
    /// report, with an event on each change to and from False), and Fallback (written by the
    /// autoscaler: False with reason QueueReadable while it reads the queue's attributes, False
    /// with reason ScalerBlind while some reads in a row failed, True with reason FallbackApplied
    /// once `spec.scaling.fallback.failureThreshold` did and the fallback sets the replicas; see
    /// `fallback`). Every type but SinksHealthy and Fallback is present once the operator has
    /// reconciled a valid source. Default empty.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Reader pods that exist (the Deployment's `status.replicas`). Default 0.
    #[serde(default)]
    pub replicas: i32,
    /// Reader pods that are ready. Default 0.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Replica count the autoscaler last asked for. Absent until its first decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Queue depth figures from the last GetQueueAttributes poll. Absent until the first poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueFigures>,
    /// Checkpoint epoch currently open (exactlyOnce only). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_epoch: Option<u64>,
    /// Last checkpoint epoch every live reader acknowledged (exactlyOnce only). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_epoch: Option<u64>,
    /// Reader pods whose lease expired and that are excluded from checkpoints until they rejoin.
    /// Default empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fenced_readers: Vec<String>,
    // Integer milliseconds rather than float seconds: the coordinator measures in milliseconds,
    // barriers are often shorter than a second, and an integer compares exactly, so re-applying
    // the same value is never a spurious change (Kubernetes API conventions also avoid floats).
    /// How long the last committed checkpoint epoch waited for every live reader's ack, in
    /// milliseconds: from its close (the opening of the next epoch) to its commit, as the
    /// coordinator saw it (exactlyOnce only). Absent until the operator saw a commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_barrier_milliseconds: Option<u64>,
    /// The redrive policy of each queue in `spec.queues`, in order, from the operator's last
    /// queue check: how many receives SQS allows a message before it moves it to the queue's
    /// dead-letter queue. A reader still spends receives: a drain on SIGTERM releases what it
    /// holds (one receive each), a crash leaves them to the visibility timeout (one each), and a
    /// delivery that fails because of the message is released with a backoff (one per attempt).
    /// With maxReceiveCount 1 every one of these dead-letters the message (a Warning event and
    /// the QueueConfigValid message say so). Absent until a queue was checked; a queue that
    /// could not be checked has no entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_redrive: Vec<QueueRedrive>,
    /// Throughput measured by the readers. Absent until a reader reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates: Option<Rates>,
    /// When the replica count last changed (RFC 3339). Absent until the first scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<String>,
    /// Why the replica count last changed. Absent until the first scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_reason: Option<String>,
    /// The autoscaler's fallback in force (`spec.scaling.fallback`) while it cannot read the
    /// queue's attributes; absent while it reads them (the `Fallback` condition says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackStatus>,
    /// What each live reader holds (received from SQS, not yet settled), from the reports in
    /// the readers' lease ConfigMaps, ordered by pod and at most `spec.scaling.maxReplicas`
    /// entries (readers that reported in the last 90 s; one that stopped reporting drops out).
    /// Readers report on a change at most every 5 s and at least every 30 s; the operator reads
    /// the reports every 5 s. Default empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<ReaderHeld>,
    /// What the live readers hold in total: the sums of `readers`. Absent until a reader reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldTotals>,
    /// Most recent reconcile or polling error. Absent when the last attempt succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The last replay request (`spec.replay`) and how far it got. Absent until one started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayStatus>,
}

/// Progress of the replay named `id`, written by the operator after every batch it moves, so a
/// restarted operator resumes where this says.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayStatus {
    /// The request's `spec.replay.id`.
    pub id: String,
    /// `Running`, `Completed` (no matching message is left in the dead-letter queue) or `Failed`
    /// (see `message`; change the spec or the id to try again).
    pub phase: String,
    /// The dead-letter queue read. Absent until it was resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_queue: Option<String>,
    /// Messages sent back to the source and deleted from the dead-letter queue.
    #[serde(default)]
    pub replayed: u64,
    /// Messages left in the dead-letter queue because they do not match the request's window or
    /// reason, or because this request already replayed them once and they were dead-lettered
    /// again (they carry `sluice-replay-id` with this id). Counted once per operator run.
    #[serde(default)]
    pub skipped: u64,
    /// Messages left in the dead-letter queue because the operator stopped between sending them
    /// and recording that it had: they may have been replayed once, so this request does not
    /// send them again (a new id does).
    #[serde(default)]
    pub uncertain: u64,
    /// The batch being moved, by dead-letter message id, and how far: `sending` (recorded before
    /// SendMessageBatch) or `sent` (recorded after it, before DeleteMessageBatch). Empty between
    /// batches. What a restarted operator reads to never send a message twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<ReplayBatch>,
    /// Ids of messages counted in `uncertain`, never sent again by this request (at most one
    /// batch per operator restart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
    /// When the request started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it completed or failed (RFC 3339). Absent while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Why it failed (what to change), or, on completion, how many dead letters stayed in flight
    /// elsewhere and were not replayed. Absent when all is well. Faults being retried are WARN
    /// lines and `sluice_operator_replay_faults_total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The replay batch in progress.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayBatch {
    /// `sending` or `sent`.
    pub stage: String,
    /// Dead-letter message ids.
    pub ids: Vec<String>,
    /// Their receipt handles, to delete a `sent` batch after a restart.
    #[serde(default)]
    pub receipts: Vec<String>,
}

/// The fallback the autoscaler applies while blind.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FallbackStatus {
    /// `keepCurrent`, `fixed` or `atLeastCurrent`, as `spec.scaling.fallback.behavior` said.
    pub behavior: String,
    /// The replica count the fallback runs.
    pub replicas: i32,
    /// Queue reads that failed in a row so far.
    pub consecutive_failures: u32,
    /// When the first of them failed (RFC 3339).
    pub since: String,
    /// The last failure, one line.
    pub last_error: String,
}

/// Message counts summed over the source's queues, from GetQueueAttributes.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueFigures {
    /// ApproximateNumberOfMessages: waiting to be received.
    pub visible: i64,
    /// ApproximateNumberOfMessagesNotVisible: received, not yet deleted.
    pub in_flight: i64,
    /// ApproximateNumberOfMessagesDelayed: sent with a delay that has not elapsed.
    pub delayed: i64,
    /// When these figures were read (RFC 3339). Absent if unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<String>,
}

/// One queue's redrive policy (its `RedrivePolicy` attribute).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueRedrive {
    /// The queue's URL.
    pub queue: String,
    /// Receives after which SQS moves a message to the dead-letter queue. Absent when the queue
    /// has no RedrivePolicy (a message is then received until it is deleted or expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_receive_count: Option<u32>,
    /// The ARN of the queue's dead-letter queue. Absent without a RedrivePolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_target_arn: Option<String>,
}

/// Rates measured by the readers and reported in their leases.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    /// Messages deleted per second, summed over the readers' reports.
    pub drain_per_second: f64,
}

/// What one reader holds, how fast it drains and how long its messages wait, as it last reported:
/// the one report a reader makes, the same under both guarantees.
///
/// Why per reader and bounded by `maxReplicas`: the bound is per reader (each derives its own
/// from its rate-limit share and its measured deliveries), so a reader stuck at its bound while
/// the others are idle shows only here; and a source has at most `maxReplicas` readers, so the
/// list stays small. The same figures are metrics of each reader (`sluice_reader_held_*`,
/// `sluice_reader_delivery_wait_seconds`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReaderHeld {
    /// The reader's pod.
    pub pod: String,
    /// Messages received and not yet settled (delivered and deleted, released or dead-lettered).
    pub held_messages: u64,
    /// Body bytes of those messages.
    pub held_bytes: u64,
    /// The bound in force on messages held: pollers wait for room above it.
    pub bound_messages: u64,
    /// The bound in force on body bytes held.
    pub bound_bytes: u64,
    /// Messages handed to the sinks in the reader's last report interval (the time since its
    /// previous report, 5 to 30 s; shorter under exactlyOnce, whose lease renewals carry it).
    pub handed_off: u64,
    /// Mean time those messages waited from their receive to their hand-off to the sinks (the
    /// rate limit's wait), in milliseconds. Absent when none was handed off in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_mean_milliseconds: Option<u64>,
    /// The longest of those waits, in milliseconds. Absent when none was handed off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_max_milliseconds: Option<u64>,
    /// Messages the reader deleted per second over its last 10 s, in thousandths (the drain rate
    /// the autoscaler sizes the fleet with, under either guarantee). Default 0.
    #[serde(default)]
    pub drain_millis_per_second: u64,
    /// What the reader costs: the AWS requests it made (every service and API, receives and
    /// deletes included), counted as AWS bills them (SQS bills each 64 KiB chunk of a payload as
    /// one request, so a receive of ten 1 MiB messages counts 160), per 1,000 messages it
    /// delivered, over its last 60 s. 200 is the floor with full batches of messages under
    /// 64 KiB (one receive and one delete per ten messages); a quiet queue costs more unless
    /// `spec.receive.batchWindowMilliseconds` lets the batches fill. Absent when nothing was
    /// delivered in that time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_requests_per_thousand_messages: Option<u64>,
    /// The age of the oldest message the reader received in the interval, from its SentTimestamp
    /// to the receive, in milliseconds: how long the oldest waiting message had been in the queue.
    /// Absent when nothing was received in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_age_milliseconds: Option<u64>,
    /// The median delivery wait in the interval: from a message's SentTimestamp to its hand-off
    /// to the sinks, in milliseconds (within about 7%). Absent when none was handed off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_wait_p50_milliseconds: Option<u64>,
    /// The 99th percentile of the same delivery wait, in milliseconds. Absent when none was
    /// handed off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_wait_p99_milliseconds: Option<u64>,
    /// The reader is draining on its way out (its last report, with drain rate 0): the
    /// autoscaler no longer counts it. Absent while it runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// Sums over the readers listed in `status.readers`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldTotals {
    /// Messages held by all live readers.
    pub messages: u64,
    /// Body bytes held by all live readers.
    pub bytes: u64,
    /// The largest `heldMessages` of one reader.
    pub max_messages_per_reader: u64,
    /// The readers' `awsRequestsPerThousandMessages`, weighted by their drain rates: what the
    /// source pays per 1,000 messages. Absent when no reader reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_requests_per_thousand_messages: Option<u64>,
}

/// The data key of a reader's [`HeldReport`] in its lease ConfigMap.
pub const HELD_REPORT_KEY: &str = "held";

/// What a reader writes under [`HELD_REPORT_KEY`] in its lease ConfigMap (JSON), from which the
/// operator makes its entry of `status.readers`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HeldReport {
    /// When the reader wrote it (milliseconds since the Unix epoch): an old report is a reader
    /// that is gone.
    pub reported_at_ms: i64,
    #[serde(flatten)]
    pub reader: ReaderHeld,
}
