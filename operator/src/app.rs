//! The operator process: logs, clients, admin server, leader election, and the tasks that run
//! while this replica leads: the controller, the autoscaler, the checkpoint coordinator and the
//! sink health follower.
//!
//! Why one shutdown token: SIGTERM, Ctrl-C and lost leadership must stop every task together and
//! let each finish what it is doing; a lost Lease ends the process with an error, so Kubernetes
//! restarts it as a standby instead of leaving a replica that still writes beside a new leader.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::client::ClientBuilder;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use crate::admin::{self, AdminState};
use crate::backoff::Failures;
use crate::checkpoint;
use crate::cli::{Cli, Switch};
use crate::controller::{self, Scope};
use crate::identity::Identities;
use crate::leader::{Elector, LeaseTimings};
use crate::metrics::Metrics;
use crate::names::FIELD_MANAGER;
use crate::own_writes::OwnWrites;
use crate::queue_check::sqs::SqsInspector;
use crate::reconcile::Context;
use crate::replay;
use crate::scaler::{self, SqsQueueAttributes};
use crate::sink_health;
use crate::source_cache::SourceCache;
use crate::telemetry;
use crate::throttle::metrics::ThrottleMetrics;
use crate::throttle::{ApiThrottle, ObservedRetry};

/// Why the operator stopped. `Debug` prints the message, because `main` returning an error prints
/// it with `Debug` and a user should read a sentence, not a struct.
#[derive(thiserror::Error)]
pub enum AppError {
    #[error("cannot set up logging or span export: {0}")]
    Logging(String),
    #[error(
        "cannot find the Kubernetes API's address and credentials (KUBECONFIG or the pod's ServiceAccount): {0}"
    )]
    Config(String),
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot install signal handlers or bind the admin server: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "leader election needs the Lease namespace and this pod's name: set POD_NAMESPACE and POD_NAME (downward API), or pass --leader-election off"
    )]
    LeaseIdentity,
    #[error("lost the leader Lease; exiting so that this replica restarts as a standby")]
    LeadershipLost,
}

impl std::fmt::Debug for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Runs the operator until SIGTERM/SIGINT, or until leadership is lost, then flushes the
/// exported spans (if any).
pub async fn run(cli: Cli) -> Result<(), AppError> {
    let telemetry = telemetry::init(cli.log_format, &cli.otlp).map_err(AppError::Logging)?;
    let outcome = operate(cli).await;
    telemetry.shutdown().await;
    outcome
}

/// How long the tasks get to finish once the operator stops; past it, it exits without them.
/// Shorter than a pod's default grace period (30 s), so the operator ends rather than being killed,
/// and nothing is lost: the next leader redoes whatever a reconcile left half done.
const STOP_GRACE: Duration = Duration::from_secs(15);

async fn operate(cli: Cli) -> Result<(), AppError> {
    let mut registry = Registry::default();
    let throttle = ApiThrottle::new(ThrottleMetrics::register(&mut registry));
    let client = client(throttle.clone()).await?;
    let shutdown = CancellationToken::new();
    watch_signals(shutdown.clone())?;

    let elector = elector(&cli, &client)?;

    let metrics = Metrics::register(&mut registry);
    crate::cache_watch::WatchMetrics::register(&mut registry);
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let inspector = Identities::new(SqsInspector::new(aws));
    let scope = Scope::from_flag(cli.namespace.clone());
    let own_writes = OwnWrites::default();
    // One watch of the sources for the four background tasks, started once this replica leads.
    let (sources, watching_sources) = SourceCache::new(&client, &scope, shutdown.child_token());
    let scaler = scaler::run(
        scaler::Inputs {
            client: client.clone(),
            scope: scope.clone(),
            sources: sources.clone(),
            queues: Arc::new(SqsQueueAttributes::with_identities(inspector.clone())),
            at_once: cli.scaler_intervals_at_once,
            own_writes: own_writes.clone(),
        },
        &mut registry,
        shutdown.child_token(),
    );

    let checkpoint = checkpoint::run(client.clone(), sources.clone(), &mut registry, shutdown.child_token());
    let sink_health =
        sink_health::run(client.clone(), scope.clone(), sources.clone(), shutdown.child_token());
    let replay =
        replay::run(client.clone(), sources, inspector.clone(), &mut registry, shutdown.child_token());

    let admin_state = Arc::new(AdminState { registry, ready: AtomicBool::new(false) });
    let admin = tokio::spawn(admin::serve(cli.admin_addr, admin_state.clone(), shutdown.clone()));
    admin_state.ready.store(true, Ordering::Relaxed);
    tokio::spawn(follow_throttling(throttle, admin_state.clone(), shutdown.clone()));

    if let Some(elector) = &elector {
        tracing::info!(lease = %cli.lease_name, "waiting to lead");
        tokio::select! {
            () = elector.acquire() => {}
            () = shutdown.cancelled() => return finish(admin, Ok(())).await,
        }
    }

    metrics.set_leading(true);
    let leading = metrics.clone();
    let reporter = Reporter { controller: FIELD_MANAGER.to_owned(), instance: cli.identity.clone() };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        inspector: Arc::new(inspector),
        reader_image: cli.reader_image.clone(),
        metrics,
        failures: Failures::default(),
        own_writes,
    });
    tracing::info!(?scope, "leading: reconciling, scaling and coordinating checkpoints");
    let stop = shutdown.clone();
    let controller =
        controller::run(ctx, scope, cli.reconciles_at_once, async move { stop.cancelled().await });
    let work = async {
        tokio::join!(watching_sources, controller, scaler, checkpoint, sink_health, replay);
    };
    let outcome = until_stopped(work, elector.as_ref(), &shutdown, &leading).await;
    if let (Some(elector), Ok(())) = (&elector, &outcome) {
        elector.release().await;
    }
    finish(admin, outcome).await
}

/// Runs the tasks until they end (after `shutdown`), leadership is lost, or they overstay the
/// stop by [`STOP_GRACE`].
async fn until_stopped(
    work: impl Future<Output = ()>,
    elector: Option<&Elector>,
    shutdown: &CancellationToken,
    leading: &Metrics,
) -> Result<(), AppError> {
    let lost = async {
        match elector {
            Some(elector) => elector.hold().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(work);
    let overdue = async {
        shutdown.cancelled().await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::select! {
        () = &mut work => Ok(()),
        () = overdue => {
            overstayed();
            Ok(())
        }
        () = lost => {
            tracing::error!("lost the leader Lease; stopping");
            leading.set_leading(false);
            shutdown.cancel();
            if tokio::time::timeout(STOP_GRACE, work).await.is_err() {
                overstayed();
            }
            Err(AppError::LeadershipLost)
        }
    }
}

fn overstayed() {
    tracing::warn!(
        grace_s = STOP_GRACE.as_secs(),
        "tasks still running after the stop; exiting without them"
    );
}

/// The Kubernetes client, from the kubeconfig or the pod's ServiceAccount, whose retries of 429s
/// are observed by `throttle` (kube's own retry layer is replaced by the same policy, observed).
/// The buffer below the retry is there because a retry sends a request again on a clone of the
/// service, and kube's built stack is a single `BoxService`; kube buffers its client the same way.
async fn client(throttle: ApiThrottle) -> Result<Client, AppError> {
    let mut config = kube::Config::infer().await.map_err(|e| AppError::Config(e.to_string()))?;
    config.default_retry = false;
    let observed = ServiceBuilder::new()
        .layer(RetryLayer::new(ObservedRetry::new(throttle)))
        .layer(BufferLayer::new(1024));
    Ok(ClientBuilder::try_from(config)?.with_layer(&observed).build())
}

/// Ends throttling episodes once they are quiet and reports not ready while one lasts: a
/// throttled leader acts late, which `kubectl get pods` then shows without reading logs.
async fn follow_throttling(throttle: ApiThrottle, admin: Arc<AdminState>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => admin.ready.store(!throttle.tick(), Ordering::Relaxed),
        }
    }
}

/// The leader election the flags ask for (`None`: this replica leads at once).
fn elector(cli: &Cli, client: &Client) -> Result<Option<Elector>, AppError> {
    match cli.leader_election {
        Switch::Off => Ok(None),
        Switch::On => {
            let (Some(namespace), Some(identity)) = (&cli.lease_namespace, &cli.identity) else {
                return Err(AppError::LeaseIdentity);
            };
            let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
            Ok(Some(Elector::new(api, &cli.lease_name, identity, LeaseTimings::default())))
        }
    }
}

/// Stops the admin server and returns `outcome` (or the admin server's own failure).
async fn finish(
    admin: tokio::task::JoinHandle<std::io::Result<()>>,
    outcome: Result<(), AppError>,
) -> Result<(), AppError> {
    admin.abort();
    match admin.await {
        Ok(Err(e)) => outcome.and(Err(AppError::Io(e))),
        _ => outcome,
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
fn watch_signals(shutdown: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        shutdown.cancel();
    });
    Ok(())
}
