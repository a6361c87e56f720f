//! The reader from start to exit: settings, sinks, queues, pipeline, drain.
//!
//! Why this order: everything that can be wrong in the spec (fields, sink URLs, queues that do
//! not answer) is found before the first ReceiveMessage, so a bad configuration exits 2 having
//! touched nothing. The drain runs the same steps whatever stopped the reader: stop receiving,
//! let deliveries finish until the deadline, release what is left, flush deletes and releases.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_crds::{Guarantee, SqsSource};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acker::Acker;
use crate::admin::Admin;
use crate::aws::{SqsClients, load_sdk_config};
use crate::coordination::cluster::{Cluster, ClusterConfig};
use crate::coordination::standalone::Standalone;
use crate::coordination::{Backend, Driver, Entries, Work};
use crate::dispatch::Dispatcher;
use crate::epochs::EpochWorker;
use crate::error::{Error, Result};
use crate::heartbeat::Heartbeat;
use crate::ledger::{DeletePolicy, Ledger};
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::poller::Poller;
use crate::settings::Settings;
use crate::sink::{self, SinkContext};
use crate::stop::Stop;
use crate::{queues, sink::Sinks};

/// How long GetQueueAttributes may take at start before the endpoint counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Part of the drain deadline kept for the last deletes and releases.
const FLUSH_RESERVE: Duration = Duration::from_secs(2);
/// How often the drain looks whether the tagged epochs are finished.
const EPOCH_DRAIN_POLL: Duration = Duration::from_millis(50);
/// Bounds of a reader lease. It must stay below half the visibility timeout (the heartbeat
/// extends at half), and short enough that a dead reader is fenced quickly.
const MIN_LEASE: Duration = Duration::from_secs(2);
const MAX_LEASE: Duration = Duration::from_secs(15);
/// Work in the air per poller, in receive batches.
const BATCHES_PER_POLLER: usize = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coordination {
    Standalone,
    Kubernetes,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub admin_addr: String,
    pub admin_addr_file: Option<PathBuf>,
    pub shutdown_deadline: Duration,
    /// Pod name in a cluster; any stable name standalone.
    pub reader_id: String,
    pub coordination: Coordination,
}

/// Run until `stop`; `Ok` after a clean drain.
pub async fn run(source: SqsSource, options: Options, stop: Stop) -> Result<()> {
    let settings = Settings::from_source(&source)?;
    let metrics = Arc::new(Metrics::new());
    let admin = Admin::new(metrics.clone());
    let (_, serving) = admin.bind(&options.admin_addr, options.admin_addr_file.as_deref()).await?;
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(serving.run(admin_stop.clone()));

    let result = run_pipeline(&settings, &options, stop, &admin, metrics).await;
    admin_stop.cancel();
    let _ = admin_task.await;
    result
}

async fn run_pipeline(
    settings: &Settings,
    options: &Options,
    stop: Stop,
    admin: &Admin,
    metrics: Arc<Metrics>,
) -> Result<()> {
    let sdk = load_sdk_config(&settings.credentials, &options.reader_id).await;
    let context = SinkContext {
        reader_id: options.reader_id.clone(),
        retry: settings.spec.delivery.retry.clone(),
        aws: sdk.clone(),
    };
    let sinks: Sinks =
        sink::build_all(&settings.spec.sinks, settings.spec.dead_letter_sink.as_ref(), &context)
            .map_err(|e| Error::config(e.field, e.message))?;
    let mut clients = SqsClients::new(sdk);
    let queues = tokio::select! {
        connected = queues::connect(settings, &mut clients, CONNECT_TIMEOUT) => connected?,
        () = stop.stopped() => return stop.take_failure().map_or(Ok(()), Err),
    };
    admin.set_ready(true);
    tracing::info!(source = %settings.source_name, queues = queues.len(), pollers = settings.receive.pollers, "reader started");

    let policy = DeletePolicy::for_guarantee(settings.guarantee);
    // Exactly-once: join the checkpoint protocol before the first receive (a cluster reader
    // first takes its lease, and waits until a previous incarnation of this pod is fenced).
    let coordination_stop = CancellationToken::new();
    let epochs = match settings.guarantee {
        Guarantee::AtLeastOnce => None,
        Guarantee::ExactlyOnce => {
            let joined = tokio::select! {
                joined = join_epochs(settings, options, &queues, coordination_stop.clone()) => joined,
                () = stop.stopped() => {
                    coordination_stop.cancel();
                    return stop.take_failure().map_or(Ok(()), Err);
                }
            };
            Some(joined?)
        }
    };
    let ledger = Arc::new(Mutex::new(Ledger::new(policy)));
    let capacity = settings.receive.pollers * settings.receive.max_messages as usize * BATCHES_PER_POLLER;
    let pipeline = Arc::new(Pipeline {
        dispatcher: Dispatcher::new(sinks, settings.fail_on_error, metrics.clone()),
        ledger: ledger.clone(),
        acker: Acker::spawn(queues.clone(), ledger.clone(), metrics.clone()),
        limiter: Arc::new(Limiter::new(settings.rate)),
        metrics: metrics.clone(),
        payload: settings.payload,
        stop: stop.clone(),
        abort: CancellationToken::new(),
        capacity: Arc::new(Semaphore::new(capacity)),
        deliveries: TaskTracker::new(),
        epochs: epochs.as_ref().map(|(driver, _)| driver.clone()),
    });
    // This replica's share of the source-wide rate limit follows the autoscaler's replica count
    // (coordination::share); the task ends with `stop`. Standalone, the full limit applies.
    crate::coordination::share::publish(&metrics, settings.rate);
    if options.coordination == Coordination::Kubernetes {
        let (limiter, token) = (pipeline.limiter.clone(), stop.token().clone());
        let source = &settings.source_name;
        crate::coordination::share::start(limiter, settings.rate, source, metrics.clone(), token).await;
    }

    let heartbeat_stop = CancellationToken::new();
    let heartbeat = Heartbeat {
        queues: queues.clone(),
        ledger: ledger.clone(),
        metrics: metrics.clone(),
        epochs: pipeline.epochs.clone(),
    };
    let heartbeat_task = tokio::spawn(heartbeat.run(heartbeat_stop.clone()));

    let epoch_worker = epochs.map(|(driver, work)| {
        let worker = EpochWorker::new(pipeline.clone(), driver);
        tokio::spawn(worker.run(work, coordination_stop.clone()))
    });

    let mut pollers = JoinSet::new();
    let mut id = 0;
    for (queue, count) in queues.iter().zip(settings.pollers_per_queue()) {
        for _ in 0..count {
            let poller = Poller {
                id,
                queue: queue.clone(),
                receive: settings.receive.clone(),
                pipeline: pipeline.clone(),
            };
            pollers.spawn(poller.run());
            id += 1;
        }
    }

    stop.stopped().await;
    let deadline = Instant::now() + options.shutdown_deadline;
    admin.set_ready(false);
    if let Some(driver) = &pipeline.epochs {
        driver.drain();
    }
    tracing::info!(in_flight = pipeline.lock_ledger().len(), "stopping: draining in-flight work");
    let work_deadline =
        deadline.checked_sub(FLUSH_RESERVE.min(options.shutdown_deadline / 4)).unwrap_or(deadline);

    if tokio::time::timeout_at(work_deadline, async { while pollers.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        pollers.abort_all();
    }
    pipeline.deliveries.close();
    if tokio::time::timeout_at(work_deadline, pipeline.deliveries.wait()).await.is_err() {
        tracing::warn!("drain deadline reached: releasing deliveries still running");
        pipeline.abort.cancel();
        pipeline.deliveries.wait().await;
    }
    if let Some(driver) = &pipeline.epochs
        && !stop.has_failed()
        && !pipeline.abort.is_cancelled()
    {
        // Let the tagged epochs close, commit and delete rather than hand their messages back for
        // redelivery (a failOnError stop releases at once instead).
        let finished = async {
            while !driver.own_epochs_done() {
                tokio::time::sleep(EPOCH_DRAIN_POLL).await;
            }
        };
        if tokio::time::timeout_at(work_deadline, finished).await.is_err() {
            tracing::warn!(stages = ?driver.standing(), "drain deadline reached before every epoch was committed");
        } else if driver.drained() {
            // Nothing left to do: leave, so the coordinator's barrier need not wait for this
            // lease to expire.
            match tokio::time::timeout_at(deadline, driver.backend().leave()).await {
                Ok(Ok(())) => tracing::info!("left the checkpoint protocol (lease expired on purpose)"),
                Ok(Err(error)) => tracing::warn!(%error, "could not remove the lease; it will expire"),
                Err(_) => tracing::warn!("drain deadline reached while removing the lease"),
            }
        }
    }
    let released = pipeline.release_all();
    if tokio::time::timeout_at(deadline, pipeline.acker.close()).await.is_err() {
        tracing::warn!("drain deadline reached before every delete and release was confirmed");
    }
    heartbeat_stop.cancel();
    let _ = heartbeat_task.await;
    coordination_stop.cancel();
    if let Some(task) = epoch_worker {
        let _ = task.await;
    }
    tracing::info!(released, deleted = metrics.deleted.get(), left = pipeline.lock_ledger().len(), "drained");
    stop.take_failure().map_or(Ok(()), Err)
}

/// The lease duration for these queues: a third of the shortest visibility timeout, within
/// bounds. A renewal needs every held message invisible for a whole lease, and the heartbeat keeps
/// them invisible for at least half the timeout, so a third leaves a sixth as margin.
pub fn lease_duration(queues: &[Arc<crate::queues::Queue>]) -> Duration {
    let shortest = queues.iter().map(|q| q.visibility).min().unwrap_or(MAX_LEASE * 3);
    (shortest / 3).clamp(MIN_LEASE, MAX_LEASE)
}

/// Start the checkpoint protocol: the in-process coordinator standalone, the own lease and the
/// operator's checkpoint ConfigMap under Kubernetes.
async fn join_epochs(
    settings: &Settings,
    options: &Options,
    queues: &[Arc<crate::queues::Queue>],
    stop: CancellationToken,
) -> Result<(Arc<Driver>, tokio::sync::mpsc::UnboundedReceiver<Work>)> {
    let interval = settings.checkpoint_interval.unwrap_or(Duration::from_secs(5));
    let (backend, inherited): (Arc<dyn Backend>, Entries) = match options.coordination {
        Coordination::Standalone => {
            (Standalone::start(&options.reader_id, interval, stop.clone()), Entries::new())
        }
        Coordination::Kubernetes => {
            let client = kube::Client::try_default()
                .await
                .map_err(|e| Error::Other(format!("cannot reach the Kubernetes API: {e}")))?;
            let namespace =
                std::env::var("POD_NAMESPACE").unwrap_or_else(|_| client.default_namespace().to_owned());
            let config = ClusterConfig {
                namespace,
                source: settings.source_name.clone(),
                source_uid: std::env::var("SLUICE_SOURCE_UID").unwrap_or_default(),
                pod: options.reader_id.clone(),
                lease_duration: lease_duration(queues),
            };
            tracing::info!(lease = ?config.lease_duration, "joining the checkpoint protocol");
            let (cluster, inherited) = Cluster::join(client, config, stop.clone())
                .await
                .map_err(|e| Error::Other(format!("cannot take the reader lease: {e}")))?;
            (cluster, inherited)
        }
    };
    Ok(Driver::start(backend, &inherited, stop))
}
