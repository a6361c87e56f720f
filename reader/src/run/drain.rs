//! The drain: whatever stopped the reader, stop receiving, let deliveries finish until the
//! deadline, let tagged epochs commit if they can, release what is left, flush the acker.
//!
//! Only deliveries under way are waited for: the sinks see the same stop (`SinkContext::stopping`)
//! and answer records that have not started yet as not started (`sink::Outcome::NotStarted`, no
//! failure of the sink's) at once, and the pipeline settles each
//! record as it is answered, so those are released within moments of the signal rather than at
//! the deadline. A reader with nothing in work stops as soon as its pollers do: when the long
//! polls they had out at the signal land (`intake::poller`: a receive hung up on would hide what
//! SQS still hands it for a visibility timeout).
//!
//! Last, it waits (briefly) for the reader's last report to the operator, which the reporter
//! writes as soon as the stop comes: a reader that drains in milliseconds would otherwise exit
//! before it says it is draining, and the autoscaler would count it until its report went stale.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Options;
use super::start::Running;
use crate::exactly_once::Driver;
use crate::process::stop::Stop;

/// Part of the drain deadline kept for the last deletes and releases.
const FLUSH_RESERVE: Duration = Duration::from_secs(2);
/// How often the drain looks whether the tagged epochs are finished.
const EPOCH_DRAIN_POLL: Duration = Duration::from_millis(50);
/// How long the end of the drain waits for the last report (a read and a write of the lease
/// ConfigMap) once everything else is done.
const LAST_REPORT_WAIT: Duration = Duration::from_secs(5);

pub async fn drain(running: Running, options: &Options, stop: &Stop) {
    let Running { pipeline, mut pollers, heartbeat, epochs, coordination_stop, reporter, metrics } = running;
    let deadline = Instant::now() + options.shutdown_deadline;
    if let Some((driver, _)) = &epochs {
        driver.drain();
    }
    tracing::info!(in_flight = pipeline.in_flight(), "stopping: draining in-flight work");
    let work_deadline =
        deadline.checked_sub(FLUSH_RESERVE.min(options.shutdown_deadline / 4)).unwrap_or(deadline);

    if tokio::time::timeout_at(work_deadline, async { while pollers.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        pollers.abort_all();
    }
    let finished = pipeline.finish_deliveries(work_deadline).await;
    if let Some((driver, _)) = &epochs
        && !stop.has_failed()
        && finished
    {
        finish_epochs(driver, work_deadline, deadline).await;
    }
    let released = pipeline.release_all();
    if tokio::time::timeout_at(deadline, pipeline.close_acker()).await.is_err() {
        tracing::warn!("drain deadline reached before every delete and release was confirmed");
    }
    let (heartbeat_stop, heartbeat_task) = heartbeat;
    heartbeat_stop.cancel();
    let _ = heartbeat_task.await;
    coordination_stop.cancel();
    if let Some((_, worker)) = epochs {
        let _ = worker.await;
    }
    tracing::info!(released, deleted = metrics.deleted.get(), left = pipeline.in_flight(), "drained");
    if let Some(reporter) = reporter {
        last_report(reporter).await;
    }
}

/// Wait up to [`LAST_REPORT_WAIT`] for the reporter to write the last report (it warns itself
/// when the write fails).
async fn last_report(reporter: JoinHandle<()>) {
    if tokio::time::timeout(LAST_REPORT_WAIT, reporter).await.is_err() {
        tracing::warn!(
            wait_ms = LAST_REPORT_WAIT.as_millis() as u64,
            "the last report (draining) was not written within {} s of the drain's end: the operator's autoscaler counts this reader until its report goes stale (up to 65 s)",
            LAST_REPORT_WAIT.as_secs()
        );
    }
}

/// Let the tagged epochs close, commit and delete rather than hand their messages back for
/// redelivery (a failOnError stop releases at once instead); then leave the protocol, so the
/// coordinator's barrier need not wait for this lease to expire.
async fn finish_epochs(driver: &Driver, work_deadline: Instant, deadline: Instant) {
    let finished = async {
        while !driver.own_epochs_done() {
            tokio::time::sleep(EPOCH_DRAIN_POLL).await;
        }
    };
    if tokio::time::timeout_at(work_deadline, finished).await.is_err() {
        tracing::warn!(stages = ?driver.standing(), "drain deadline reached before every epoch was committed");
        return;
    }
    if !driver.drained() {
        return;
    }
    match tokio::time::timeout_at(deadline, driver.backend().leave()).await {
        Ok(Ok(())) => tracing::info!("left the checkpoint protocol (lease expired on purpose)"),
        Ok(Err(error)) => tracing::warn!(%error, "could not remove the lease; it will expire"),
        Err(_) => tracing::warn!("drain deadline reached while removing the lease"),
    }
}
