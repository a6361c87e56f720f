//! From settings to a running pipeline: sinks built, queues reached, the gate chosen, the tasks
//! (pollers, heartbeat, epoch worker, rate share) started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_crds::{Fairness, Guarantee, SqsSourceSpec};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::pollers::Crew;
use super::{Coordination, Options, epochs};
use crate::aws::queue::{self, Queue};
use crate::aws::{SqsClients, load_sdk_config};
use crate::config::payload::PayloadSettings;
use crate::config::settings::Settings;
use crate::deliver::dispatch::Dispatcher;
use crate::exactly_once::{Driver, EpochGate, EpochWorker};
use crate::intake::bound::Rule;
use crate::intake::context::Intake;
use crate::intake::filtering::FilterStage;
use crate::intake::limiter::{self, Limiter};
use crate::intake::pacing;
use crate::intake::poller_count::Bounds;
use crate::payload::cleanup::ObjectCleanup;
use crate::payload::{self, Resolver};
use crate::process::admin::Admin;
use crate::process::backoff::backoff;
use crate::process::error::{Error, Result};
use crate::process::events::Event;
use crate::process::events::targets::StartUnreachable;
use crate::process::metrics::Metrics;
use crate::process::settled::Settled;
use crate::process::stop::Stop;
use crate::settle::acker::Acker;
use crate::settle::heartbeat::Heartbeat;
use crate::settle::held::Held;
use crate::settle::held_report::ReaderReport;
use crate::settle::ledger::{DeletePolicy, Ledger};
use crate::settle::{Gate, Open, Pipeline};
use crate::sink::{self, SinkContext, Sinks};

/// How long GetQueueAttributes may take at start before the endpoint counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Backoff between attempts to reach an unreachable queue at start.
const FIRST_CONNECT_RETRY: Duration = Duration::from_secs(1);
const LONGEST_CONNECT_RETRY: Duration = Duration::from_secs(30);

/// What the drain takes apart.
pub struct Running {
    pub pipeline: Arc<Pipeline>,
    pub pollers: JoinSet<()>,
    pub heartbeat: (CancellationToken, JoinHandle<()>),
    /// Under exactlyOnce: the driver and its worker.
    pub epochs: Option<(Arc<Driver>, JoinHandle<()>)>,
    /// Ends the protocol's tasks (driver, backend, worker) after the drain.
    pub coordination_stop: CancellationToken,
    /// The at-least-once reader's report writer in a cluster: it writes the last report (the
    /// reader draining) at the stop, and the drain waits for it.
    pub reporter: Option<JoinHandle<()>>,
    pub metrics: Arc<Metrics>,
}

/// Start everything; `None` if `stop` came first.
pub async fn start(
    settings: &Settings,
    options: &Options,
    stop: &Stop,
    admin: &Admin,
    metrics: Arc<Metrics>,
) -> Result<Option<Running>> {
    #[cfg(not(feature = "cluster"))]
    if options.coordination == Coordination::Kubernetes {
        return Err(epochs::not_built_for_clusters());
    }
    metrics.health.set_unready_after(options.unready_after);
    let sdk = load_sdk_config(&settings.credentials, &options.reader_id, &metrics.requests).await;
    let Outputs { sinks, resolver, objects } = outputs(settings, options, stop, &metrics, &sdk)?;
    let report = Arc::new(ReaderReport::new(metrics.clone(), sinks.circuits.clone()));
    let mut clients = SqsClients::new(sdk, metrics.requests.clone());
    let Some(queues) = connect_queues(settings, &mut clients, stop, &metrics).await? else {
        return Ok(None);
    };
    super::targets::check(settings, &mut clients, stop, &metrics).await;
    admin.set_ready(!metrics.health.targets_missing());
    watch_readiness(admin.clone(), stop.clone(), report.clone());
    tracing::info!(source = %settings.source_name, queues = queues.len(), pollers = settings.receive.pollers, "reader started");

    // Exactly-once: join the checkpoint protocol before the first receive (a cluster reader
    // first takes its lease, and waits until a previous incarnation of this pod is fenced).
    let coordination_stop = CancellationToken::new();
    let joined = match settings.guarantee {
        Guarantee::AtLeastOnce => None,
        Guarantee::ExactlyOnce => tokio::select! {
            joined = epochs::join(settings, options, &queues, &report, coordination_stop.clone()) => Some(joined?),
            () = stop.stopped() => {
                coordination_stop.cancel();
                return Ok(None);
            }
        },
    };
    let gate: Arc<dyn Gate> = match &joined {
        None => Arc::new(Open),
        Some((driver, _)) => Arc::new(EpochGate::new(driver.clone(), metrics.clone())),
    };
    let filter = filter_stage(settings, &sinks)?;
    let (pipeline, ledger) = pipeline(settings, sinks, &filter, &objects, &queues, &gate, &metrics, stop);
    let window = settings.receive.batch_window;
    let limiter = Arc::new(Limiter::new(settings.rate));
    follow_rate_share(settings, options, &limiter, &metrics, stop).await;
    let reporter = super::report::sink_health(settings, options, &report, stop).await;

    let heartbeat_stop = CancellationToken::new();
    let heartbeat = Heartbeat { queues: queues.clone(), ledger, metrics: metrics.clone(), gate, window };
    let heartbeat_task = tokio::spawn(heartbeat.run(heartbeat_stop.clone()));
    let epochs = joined.map(|(driver, work)| {
        let worker = EpochWorker::new(pipeline.clone(), driver.clone(), metrics.clone());
        (driver, tokio::spawn(worker.run(work, coordination_stop.clone())))
    });
    let (pollers, held) = spawn_pollers(
        settings,
        &queues,
        &pipeline,
        &metrics,
        limiter,
        TakeIn { resolver, objects, filter },
        stop,
    );
    report.register(&held);
    Ok(Some(Running {
        pipeline,
        pollers,
        heartbeat: (heartbeat_stop, heartbeat_task),
        epochs,
        coordination_stop,
        reporter,
        metrics,
    }))
}

/// Deliveries at once that `spec.delivery.fairness: byGroup` shares among message groups: as many
/// as the tightest per-record http sink takes (its `concurrency`), so its own limit never queues
/// and the turns decide the order; 32 (the http default) with no such sink.
fn fair_slots(spec: &SqsSourceSpec) -> Option<usize> {
    if spec.delivery.fairness != Fairness::ByGroup {
        return None;
    }
    let tightest = spec
        .sinks
        .iter()
        .filter_map(|s| s.http.as_ref())
        .filter(|h| h.batch.is_none())
        .map(|h| h.concurrency)
        .min();
    Some(usize::try_from(tightest.unwrap_or(32)).unwrap_or(32))
}

/// The settling pipeline: the ledger (whose delete policy the guarantee sets), the dispatcher to
/// the sinks (mismatches diverted where the filter routes them) and the acker (which tells the
/// object cleanup what it settled). Answers the ledger too, which the heartbeat reads.
#[allow(clippy::too_many_arguments)] // the parts start wires together, each named once
fn pipeline(
    settings: &Settings,
    sinks: Sinks,
    filter: &Option<Arc<FilterStage>>,
    objects: &Option<Arc<ObjectCleanup>>,
    queues: &[Arc<Queue>],
    gate: &Arc<dyn Gate>,
    metrics: &Arc<Metrics>,
    stop: &Stop,
) -> (Arc<Pipeline>, Arc<Mutex<Ledger>>) {
    let ledger = Arc::new(Mutex::new(Ledger::new(DeletePolicy::for_guarantee(settings.guarantee))));
    let diverted = filter.as_ref().and_then(|f| f.route_to());
    let dispatcher = Dispatcher::new(sinks, settings.fail_on_error, metrics.clone())
        .divert_to(diverted)
        .fair_by_group(fair_slots(&settings.spec));
    let window = settings.receive.batch_window;
    let settled = objects.clone().map(|o| o as Arc<dyn Settled>);
    let acker = Acker::spawn_lingering(queues.to_vec(), ledger.clone(), metrics.clone(), settled, window);
    let pipeline =
        Pipeline::new(dispatcher, ledger.clone(), acker, metrics.clone(), stop.clone(), gate.clone());
    (Arc::new(pipeline), ledger)
}

/// `spec.filter`, compiled once for every poller (absent: none).
fn filter_stage(settings: &Settings, sinks: &Sinks) -> Result<Option<Arc<FilterStage>>> {
    let Some(spec) = &settings.spec.filter else { return Ok(None) };
    let names: Vec<&str> = sinks.sinks.iter().map(|s| s.sink.name()).collect();
    Ok(Some(Arc::new(FilterStage::new(spec, &names)?)))
}

/// What the pollers take a message in with, besides the pipeline (`intake::context::Intake`).
struct TakeIn {
    resolver: Option<Arc<Resolver>>,
    objects: Option<Arc<ObjectCleanup>>,
    filter: Option<Arc<FilterStage>>,
}

/// Where records go and what they need on the way.
struct Outputs {
    sinks: Sinks,
    /// The resolver of payloads kept in S3 (absent unless the payload format names one).
    resolver: Option<Arc<Resolver>>,
    /// The deleter of Extended Client objects (absent unless `extendedClient.deleteObjects`).
    objects: Option<Arc<ObjectCleanup>>,
}

fn outputs(
    settings: &Settings,
    options: &Options,
    stop: &Stop,
    metrics: &Arc<Metrics>,
    sdk: &aws_config::SdkConfig,
) -> Result<Outputs> {
    let payload = PayloadSettings::from_spec(&settings.spec.payload)?;
    let resolver = payload::build(&payload, sdk, metrics).map(Arc::new);
    if let Some(resolver) = &resolver {
        metrics.payload.watch(resolver.stats());
    }
    let context = SinkContext {
        reader_id: options.reader_id.clone(),
        retry: settings.spec.delivery.retry.clone(),
        aws: sdk.clone(),
        stopping: stop.token().clone(),
        requests: metrics.requests.clone(),
        objects: resolver.as_ref().map(|r| r.streams()),
    };
    let sinks: Sinks =
        sink::build_all(&settings.spec.sinks, settings.spec.dead_letter_sink.as_ref(), &context)
            .map_err(|e| Error::config(e.field, e.message))?;
    let objects = resolver
        .as_ref()
        .filter(|_| payload.delete_objects)
        .map(|r| ObjectCleanup::start(r.client().clone(), metrics.clone()));
    Ok(Outputs { sinks, resolver, objects })
}

/// This replica's share of the source-wide rate limit follows the autoscaler's replica count
/// (`cluster::share`); the task ends with `stop`. Standalone, the full limit applies.
async fn follow_rate_share(
    settings: &Settings,
    options: &Options,
    limiter: &Arc<Limiter>,
    metrics: &Arc<Metrics>,
    stop: &Stop,
) {
    limiter::publish(metrics, settings.rate);
    if options.coordination != Coordination::Kubernetes {
        return;
    }
    #[cfg(feature = "cluster")]
    {
        let (limiter, token) = (limiter.clone(), stop.token().clone());
        let source = &settings.source_name;
        crate::cluster::start_share(limiter, settings.rate, source, metrics.clone(), token).await;
    }
    #[cfg(not(feature = "cluster"))]
    let _ = (limiter, stop);
}

/// Each queue's pollers, from its share of `receive.pollers` up to twice that as its receives
/// come back full (`run::pollers`), all sharing what the reader holds and the limiter.
///
/// Why at most twice: what the reader holds is bounded by `settle::held` whatever the count (a
/// poller claims room for its batch before it receives), so extra pollers only help while that
/// bound has room; twice the spec's count covers a round trip twice as long as the spec assumed.
fn spawn_pollers(
    settings: &Settings,
    queues: &[Arc<Queue>],
    pipeline: &Arc<Pipeline>,
    metrics: &Arc<Metrics>,
    limiter: Arc<Limiter>,
    TakeIn { resolver, objects, filter }: TakeIn,
    stop: &Stop,
) -> (JoinSet<()>, Arc<Held>) {
    let batch = settings.receive.max_messages as usize;
    let rule = Rule::from_settings(settings);
    let held = pacing::start(rule, limiter.clone(), metrics.clone(), stop.clone());
    let mut pollers = JoinSet::new();
    for (queue, count) in queues.iter().zip(settings.pollers_per_queue()) {
        let intake = Intake {
            queue: queue.clone(),
            receive: settings.receive.clone(),
            payload: settings.payload,
            limiter: limiter.clone(),
            held: held.clone(),
            pipeline: pipeline.clone(),
            resolver: resolver.clone(),
            objects: objects.clone(),
            filter: filter.clone(),
            metrics: metrics.clone(),
            stop: stop.clone(),
        };
        let crew = Crew {
            intake: Arc::new(intake),
            bounds: Bounds { min: count, max: count * 2, batch, rate: settings.rate.messages_per_second },
        };
        pollers.spawn(crew.run());
    }
    (pollers, held)
}

/// Reach the source's queues. A configuration error ends the start (exit 2); an outage is retried
/// with backoff, one WARN line per attempt, while `/readyz` stays false. `None` if `stop` came first.
async fn connect_queues(
    settings: &Settings,
    clients: &mut SqsClients,
    stop: &Stop,
    metrics: &Metrics,
) -> Result<Option<Vec<Arc<Queue>>>> {
    let mut delays = backoff(FIRST_CONNECT_RETRY, LONGEST_CONNECT_RETRY);
    loop {
        let attempt = tokio::select! {
            connected = queue::connect(settings, clients, CONNECT_TIMEOUT) => connected,
            () = stop.stopped() => return Ok(None),
        };
        let outage = match attempt {
            Ok(queues) => return Ok(Some(queues)),
            Err(outage @ Error::Outage { .. }) => outage,
            Err(other) => return Err(other),
        };
        let wait = delays.next().unwrap_or(LONGEST_CONNECT_RETRY);
        StartUnreachable { outage: &outage.to_string(), retry_in: wait }.emit(metrics);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.stopped() => return Ok(None),
        }
    }
}

/// Every second: not ready while deliveries fail and none succeeded for `--unready-after-seconds`,
/// while receives from a queue fail and SQS has not answered for as long, while payload fetches fail and S3 has not answered for as long (`payload::events`), or while a
/// target is missing (`targets`), as the reader's health (`process::health`) says; ready again on
/// the next success. Leaves readiness alone once the reader stops (the drain owns it then).
fn watch_readiness(admin: Admin, stop: Stop, report: Arc<ReaderReport>) {
    tokio::spawn(async move {
        let (health, after) = (report.health(), report.health().unready_after());
        let mut was_stalled = false;
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = stop.stopped() => return,
            }
            let fetches_failing = health.fetches_stalled();
            let receives_failing = health.receives_stalled();
            let stalled =
                report.sinks_stalled() || health.targets_missing() || fetches_failing || receives_failing;
            if stalled != was_stalled {
                if health.targets_missing() {
                    // `targets` said which one, and says when it is found.
                } else if stalled && report.circuit_open() {
                    // `sink::circuit` said which sink, and says when it closes.
                    tracing::warn!("a sink's circuit is open: not ready");
                } else if stalled && receives_failing {
                    tracing::warn!(
                        seconds = after.as_secs(),
                        "receives from SQS have failed for {} s without an answer: what is held stays held, its deletes retried; not ready",
                        after.as_secs()
                    );
                } else if stalled && fetches_failing {
                    tracing::warn!(
                        seconds = after.as_secs(),
                        "payload fetches from S3 have failed for {} s without an answer: messages are held; not ready",
                        after.as_secs()
                    );
                } else if stalled {
                    tracing::warn!(
                        seconds = after.as_secs(),
                        "no delivery succeeded for {} s while deliveries fail: not ready",
                        after.as_secs()
                    );
                } else {
                    tracing::info!(
                        "receives, deliveries and fetches succeed and every target is found: ready"
                    );
                }
                admin.set_ready(!stalled);
                was_stalled = stalled;
            }
        }
    });
}
