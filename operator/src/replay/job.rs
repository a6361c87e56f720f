//! One replay request of one source, from its first batch (or where a restart left it) to its
//! completion: receive dead letters, decide, send the wanted ones back at the request's rate,
//! record, delete.
//!
//! Why this order per batch: record `sending` → SendMessageBatch → record `sent` (with the
//! count) → DeleteMessageBatch. An operator that stops anywhere leaves a journal that says which
//! messages may have been sent (see `plan::resume`). A fault (SQS or the status write) is retried
//! with a backoff of 1 s doubling to 30 s, with a WARN line when it starts, the fault in
//! `status.replay.message` and a metric.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_sqs::types::Message;
use k8s_openapi::jiff::Timestamp;
use sluice_crds::checkpoint::now_ms;
use sluice_crds::{ReplayBatch, ReplaySpec, ReplayStatus};
use tokio_util::sync::CancellationToken;

use super::mover::{self, HIDE_SECONDS, Mover};
use super::plan::{self, COMPLETED, FAILED, Memory, Resume, SENDING, SENT, Skip, Verdict, Window};
use super::report::Reporter;
use crate::identity::Identities;

/// Empty receives in a row after which nothing visible is left.
const EMPTY_TO_FINISH: u32 = 2;
/// How long a request waits for dead letters in flight elsewhere (a batch an operator held when
/// it stopped comes back within the mover's `IN_HAND_SECONDS`) before it completes without them.
const SETTLE: Duration = Duration::from_secs(2 * mover::IN_HAND_SECONDS as u64);
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

struct Run<'a> {
    report: &'a Reporter,
    spec: &'a ReplaySpec,
    mover: Mover,
    window: Window,
    memory: Memory,
    status: ReplayStatus,
    /// Receipts of what the request leaves behind, shown again when it completes.
    hidden: Vec<String>,
    skipped_seen: HashSet<String>,
    next_ms: i64,
}

/// Runs request `spec` until it completes, fails, or `stop`.
pub async fn run(report: Reporter, identities: Identities, spec: ReplaySpec, stop: CancellationToken) {
    let previous = report.source.status.as_ref().and_then(|s| s.replay.clone());
    let now = Timestamp::now().to_string();
    let Some(Resume { status, memory, receipts }) = plan::resume(previous.as_ref(), &spec.id, &now) else {
        return;
    };
    let labels = report.labels();
    report.metrics.running.get_or_create(&labels).set(1);
    let fresh = previous.as_ref().is_none_or(|p| p.id != spec.id);
    let new_uncertain = status.uncertain - previous.as_ref().filter(|_| !fresh).map_or(0, |p| p.uncertain);
    let outcome = tokio::select! {
        () = stop.cancelled() => None,
        outcome = start(&report, &identities, &spec, status, memory, receipts, (fresh, new_uncertain)) => Some(outcome),
    };
    report.metrics.running.get_or_create(&labels).set(0);
    if let Some(Err((mut status, message))) = outcome {
        tracing::warn!(source = %labels.source, namespace = %labels.namespace, id = %spec.id, %message, "replay failed");
        status.phase = FAILED.to_owned();
        status.finished_at = Some(Timestamp::now().to_string());
        status.message = Some(message.clone());
        if let Err(error) = report.write(&status).await {
            tracing::warn!(%error, "replay: cannot record the failure");
        }
        report.event(true, "ReplayFailed", format!("replay {}: {message}", spec.id)).await;
    }
}

/// Resolves the queues, announces the request, and moves batches until done. `Err` carries the
/// status and a configuration problem the user must fix.
async fn start(
    report: &Reporter,
    identities: &Identities,
    spec: &ReplaySpec,
    mut status: ReplayStatus,
    memory: Memory,
    receipts: Vec<String>,
    (fresh, new_uncertain): (bool, u64),
) -> Result<(), (ReplayStatus, String)> {
    let window = match plan::Window::of(spec) {
        Ok(window) => window,
        Err(message) => return Err((status, message)),
    };
    let mover = match Mover::resolve(identities, &report.source.spec).await {
        Ok(mover) => mover,
        Err(message) if message.starts_with("spec.") => return Err((status, message)),
        Err(message) => {
            // A fault, not the spec's: the next tick tries again.
            report.metrics.faults.get_or_create(&report.labels()).inc();
            tracing::warn!(id = %spec.id, %message, "replay: cannot find the queues; retried at the next tick");
            return Ok(());
        }
    };
    status.dead_letter_queue = Some(mover.dlq_url.clone());
    let mut run = Run {
        report,
        spec,
        mover,
        window,
        memory,
        status,
        hidden: Vec::new(),
        skipped_seen: HashSet::new(),
        next_ms: 0,
    };
    // A stale receipt handle fails; the ids in `memory.delete_only` are deleted when seen.
    if let Err(error) = run.mover.delete(&receipts).await {
        tracing::info!(id = %spec.id, %error, "replay: the batch sent before the restart is deleted when received again");
    }
    retry(report, &spec.id, "recording the replay", || report.write(&run.status)).await;
    announce(&run, fresh, new_uncertain).await;
    run.moves().await;
    Ok(())
}

/// The Event and log line of a (re)started request.
async fn announce(run: &Run<'_>, fresh: bool, new_uncertain: u64) {
    let s = &run.status;
    let dlq = s.dead_letter_queue.clone().unwrap_or_default();
    let note = if fresh {
        format!("replay {} started: from {dlq} at {} messages/s", s.id, run.spec.rate_per_second)
    } else {
        format!(
            "replay {} resumed after a restart: {} replayed so far, {} uncertain",
            s.id, s.replayed, s.uncertain
        )
    };
    tracing::info!(id = %s.id, "{note}");
    run.report.event(false, if fresh { "ReplayStarted" } else { "ReplayResumed" }, note).await;
    if new_uncertain > 0 {
        let note = format!(
            "replay {}: {new_uncertain} dead letters were being sent when the operator stopped; they may have reached the source, so they stay in {dlq} and this request does not send them again (a new spec.replay.id does)",
            s.id
        );
        run.report.count("uncertain", new_uncertain);
        run.report.event(true, "ReplayUncertain", note).await;
    }
}

/// Runs `call` until it succeeds, with backoff; each fault is counted, and the first of a run of
/// faults is a WARN line (its end an INFO line).
async fn retry<T, F, Fut>(report: &Reporter, id: &str, what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let mut delay = BACKOFF_START;
    let mut failing = false;
    loop {
        match call().await {
            Ok(value) => {
                if failing {
                    tracing::info!(%id, "replay: {what} works again");
                }
                return value;
            }
            Err(error) => {
                report.metrics.faults.get_or_create(&report.labels()).inc();
                if !failing {
                    tracing::warn!(%id, %error, "replay: {what} failed; retried with backoff (1 s doubling to 30 s)");
                    failing = true;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// One received batch, sorted by verdict.
#[derive(Default)]
struct Sorted<'m> {
    replay: Vec<&'m Message>,
    delete_only: Vec<String>,
    keep: Vec<(&'m Message, Skip)>,
}

impl Run<'_> {
    /// Batches until two receives in a row find nothing the request wants and no dead letter is
    /// in flight but those it hides itself (or [`SETTLE`] has passed waiting for them).
    async fn moves(&mut self) {
        let mut waiting_since = None;
        loop {
            self.batches().await;
            let (visible, in_flight) =
                retry(self.report, &self.spec.id, "counting dead letters", || self.mover.counts()).await;
            let elsewhere = (visible + in_flight).saturating_sub(self.hidden.len() as u64);
            let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
            if elsewhere == 0 || since.elapsed() >= SETTLE {
                if elsewhere > 0 {
                    self.status.message = Some(format!(
                        "{elsewhere} dead letters stayed in flight (received by another consumer?) and were not replayed"
                    ));
                }
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.complete().await;
    }

    /// Receives and moves batches until two receives in a row find nothing the request wants.
    async fn batches(&mut self) {
        let mut empty = 0;
        while empty < EMPTY_TO_FINISH {
            let received =
                retry(self.report, &self.spec.id, "receiving dead letters", || self.mover.receive()).await;
            let sorted = self.sort(&received);
            empty = if sorted.replay.is_empty() && sorted.delete_only.is_empty() { empty + 1 } else { 0 };
            self.keep(&sorted.keep).await;
            retry(self.report, &self.spec.id, "deleting replayed dead letters", || {
                self.mover.delete(&sorted.delete_only)
            })
            .await;
            if !sorted.replay.is_empty() {
                self.send(&sorted.replay).await;
            }
        }
    }

    fn sort<'m>(&self, received: &'m [Message]) -> Sorted<'m> {
        let mut sorted = Sorted::default();
        for m in received {
            let reason = mover::reason(m);
            let c = mover::candidate(m, reason.as_deref());
            match plan::judge(&self.spec.id, &self.window, &self.memory, &c) {
                Verdict::Replay => sorted.replay.push(m),
                Verdict::DeleteOnly => {
                    sorted.delete_only.push(m.receipt_handle().unwrap_or_default().to_owned())
                }
                Verdict::Keep(why) => sorted.keep.push((m, why)),
            }
        }
        sorted
    }

    /// Hides what the request leaves behind until it completes, counting each once.
    async fn keep(&mut self, kept: &[(&Message, Skip)]) {
        let receipts: Vec<String> =
            kept.iter().filter_map(|(m, _)| m.receipt_handle().map(str::to_owned)).collect();
        for (m, why) in kept {
            let id = m.message_id().unwrap_or_default();
            if *why != Skip::LeftBehind && self.skipped_seen.insert(id.to_owned()) {
                self.status.skipped += 1;
                self.report.count("skipped", 1);
            }
        }
        retry(self.report, &self.spec.id, "hiding skipped dead letters", || {
            self.mover.set_visibility(&receipts, HIDE_SECONDS)
        })
        .await;
        self.hidden.extend(receipts);
    }

    /// Sends `batch` back at the request's rate, journalled in the status (see the module doc).
    async fn send(&mut self, batch: &[&Message]) {
        let (wait, next) = plan::pace(self.next_ms, now_ms(), batch.len(), self.spec.rate_per_second);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        self.next_ms = next;
        let queues = self.mover.target_urls();
        let mut groups: Vec<(String, Vec<&Message>)> = Vec::new();
        for m in batch {
            let named = mover::source_queue(m);
            let target = plan::target(&queues, named.as_deref()).cloned().unwrap_or_default();
            match groups.iter_mut().find(|(t, _)| *t == target) {
                Some((_, members)) => members.push(m),
                None => groups.push((target, vec![m])),
            }
        }
        for (target, members) in groups {
            self.send_group(&target, &members).await;
        }
    }

    async fn send_group(&mut self, target: &str, members: &[&Message]) {
        let ids =
            |ms: &[&Message]| ms.iter().map(|m| m.message_id().unwrap_or_default().to_owned()).collect();
        let receipts =
            |ms: &[&Message]| ms.iter().map(|m| m.receipt_handle().unwrap_or_default().to_owned()).collect();
        self.status.batch =
            Some(ReplayBatch { stage: SENDING.to_owned(), ids: ids(members), receipts: Vec::new() });
        retry(self.report, &self.spec.id, "recording the batch", || self.report.write(&self.status)).await;
        let accepted = retry(self.report, &self.spec.id, "sending dead letters back", || {
            self.mover.send(target, &self.spec.id, members)
        })
        .await;
        let sent: Vec<&Message> = accepted.iter().filter_map(|i| members.get(*i).copied()).collect();
        let sent_receipts: Vec<String> = receipts(&sent);
        self.status.replayed += sent.len() as u64;
        self.status.batch =
            Some(ReplayBatch { stage: SENT.to_owned(), ids: ids(&sent), receipts: sent_receipts.clone() });
        retry(self.report, &self.spec.id, "recording the batch", || self.report.write(&self.status)).await;
        self.report.count("replayed", sent.len() as u64);
        retry(self.report, &self.spec.id, "deleting replayed dead letters", || {
            self.mover.delete(&sent_receipts)
        })
        .await;
        self.status.batch = None;
        // What SQS refused in the batch is visible again at once, for a later batch.
        let refused: Vec<String> = members
            .iter()
            .filter(|m| !sent.iter().any(|s| s.message_id == m.message_id))
            .map(|m| m.receipt_handle().unwrap_or_default().to_owned())
            .collect();
        if let Err(error) = self.mover.set_visibility(&refused, 0).await {
            tracing::info!(id = %self.spec.id, %error, "replay: refused dead letters come back after their visibility timeout");
        }
    }

    /// Shows again what was left behind, records the completion and says so.
    async fn complete(&mut self) {
        if let Err(error) = self.mover.set_visibility(&self.hidden, 0).await {
            tracing::info!(id = %self.spec.id, %error, "replay: skipped dead letters come back after their visibility timeout");
        }
        self.status.phase = COMPLETED.to_owned();
        self.status.finished_at = Some(Timestamp::now().to_string());
        retry(self.report, &self.spec.id, "recording the completion", || self.report.write(&self.status))
            .await;
        let s = &self.status;
        let note = format!(
            "replay {} completed: {} replayed, {} left in the dead-letter queue (not asked for, or replayed once already), {} uncertain",
            s.id, s.replayed, s.skipped, s.uncertain
        );
        tracing::info!(id = %s.id, "{note}");
        self.report.event(false, "ReplayCompleted", note).await;
    }
}
