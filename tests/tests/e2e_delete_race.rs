//! Deleting a source while its reader works through a backlog, many times in a row, as separate
//! processes: LocalStack, the local control plane with its process runner, the real operator, and a
//! real reader per replica.
//!
//! What must hold after every delete: soon after (`CLEAN_WITHIN`; the times are printed), no child
//! object of the source (Deployment, ConfigMaps, ServiceAccount, RoleBinding) and no reader
//! process (terminating ones included).
//! And stronger, because the control plane's garbage collector removes a child written for an owner
//! that is already gone right after the write (as a real cluster's does): the operator must never
//! write such a child at all. A watch over every child kind records each object's first appearance;
//! the control plane's resourceVersions are one global counter, so a child that first appears after
//! its owner's DELETED event is caught even if the collector removed it a moment later.
//! A reader's own lease ConfigMap is the one child the operator does not write: a reader that the
//! rollout started just before the delete may create it before its SIGTERM arrives (it cannot see
//! the source; its policy lets it write only that object). Those are counted and printed, and must
//! be collected like every other child (the leftover check), but they are not the operator's writes.
//!
//! To make the race likely, every round touches the source (a label change, which starts a
//! reconcile) and deletes it a few milliseconds later, while the reader is delivering.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use sluice_crds::SqsSource;
use sluice_protocol::ROLE_LABEL;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const ROUNDS: usize = 20;
/// How long after a delete everything must be gone: a bound on liveness (nothing left behind for
/// good), not a speed target, whose figures are printed (median and max). A delete waits for any
/// reconcile of the source in flight, then the finalizer's release, the garbage collector and the
/// reader's drain on SIGTERM; on a quiet machine that is 1-5 s, but in the test command, beside two
/// more control planes and LocalStack with the run queue at 13-25 on two cores, one round took over
/// 10 s with every step behaving.
const CLEAN_WITHIN: Duration = Duration::from_secs(60);
/// Backlog kept in the queue: topped up to this before a round when it ran low.
const BACKLOG: usize = 2000;
const LOW_WATER: u64 = 500;

/// One reader, fixed (so the autoscaler never writes), a short grace period so a reader that is
/// told to stop is gone within the bound even with messages in hand (the reader's drain is not
/// what this test measures), and a `touch` label that the touch before the delete changes.
fn source_yaml(name: &str, queue: &TestQueue, endpoint: &str, sink: &str, touch: &str) -> String {
    SourceYaml::new(name, &queue.url, endpoint)
        .label("touch", touch)
        .visibility_timeout(5)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(1, 1)
        .grace_period(5)
        .yaml()
}

/// One object as a watch first showed it.
#[derive(Debug, Clone)]
struct Sighting {
    kind: &'static str,
    name: String,
    owners: Vec<String>,
    rv: u64,
    /// Written by a reader (its lease), not by the operator.
    by_reader: bool,
}

/// What the watches saw: each child's first appearance (by uid) and each source's removal.
#[derive(Default)]
struct Seen {
    first: HashMap<String, Sighting>,
    /// Source uid -> resourceVersion of its DELETED event.
    removed: HashMap<String, u64>,
}

fn rv_of<K: Resource>(object: &K) -> u64 {
    object.meta().resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

/// The watch events of one kind, as (kind, deleted?, object's uid, sighting).
fn watch<K>(client: kube::Client, kind: &'static str) -> impl Stream<Item = (bool, String, Sighting)> + Send
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::default_namespaced(client);
    watcher(api, watcher::Config::default()).default_backoff().filter_map(move |event| async move {
        let (deleted, object) = match event.ok()? {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (false, o),
            watcher::Event::Delete(o) => (true, o),
            watcher::Event::Init | watcher::Event::InitDone => return None,
        };
        let owners = object.owner_references().iter().map(|r| r.uid.clone()).collect();
        let by_reader = object.labels().get(ROLE_LABEL).is_some_and(|role| role == "lease");
        let sighting = Sighting { kind, name: object.name_any(), owners, rv: rv_of(&object), by_reader };
        Some((deleted, object.uid().unwrap_or_default(), sighting))
    })
}

/// Watches the sources and every child kind until the returned task is aborted.
fn start_watching(client: &kube::Client) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let streams = futures::stream::select_all([
        watch::<SqsSource>(client.clone(), "SqsSource").boxed(),
        watch::<Deployment>(client.clone(), "Deployment").boxed(),
        watch::<ConfigMap>(client.clone(), "ConfigMap").boxed(),
        watch::<ServiceAccount>(client.clone(), "ServiceAccount").boxed(),
        watch::<RoleBinding>(client.clone(), "RoleBinding").boxed(),
    ]);
    let record = seen.clone();
    let task = tokio::spawn(streams.for_each(move |(deleted, uid, sighting)| {
        let mut s = record.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if sighting.kind == "SqsSource" {
            if deleted {
                s.removed.insert(uid, sighting.rv);
            }
        } else {
            s.first.entry(uid).or_insert(sighting);
        }
        async {}
    }));
    (seen, task)
}

/// Children that first appeared after their owning source had been removed.
fn resurrections(seen: &Seen) -> Vec<Sighting> {
    let mut late: Vec<Sighting> = seen
        .first
        .values()
        .filter(|s| {
            !s.owners.is_empty()
                && s.owners.iter().all(|owner| seen.removed.get(owner).is_some_and(|gone| s.rv > *gone))
        })
        .cloned()
        .collect();
    late.sort_by_key(|s| s.rv);
    late
}

/// What is left of source `name` (uid `uid`): child objects and reader processes.
async fn leftovers(system: &System, name: &str, uid: &str) -> Result<Vec<String>> {
    let client = &system.client;
    let selector = ListParams::default().labels(&format!("sluice.dev/source={name}"));
    let mut left = Vec::new();
    async fn named<K>(
        client: &kube::Client,
        selector: &ListParams,
        uid: &str,
        kind: &str,
        out: &mut Vec<String>,
    ) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::default_namespaced(client.clone());
        let by_label = api.list(selector).await?.items;
        let by_owner = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|o| o.owner_references().iter().any(|r| r.uid == uid));
        let mut names: Vec<String> =
            by_label.into_iter().chain(by_owner).map(|o| format!("{kind}/{}", o.name_any())).collect();
        names.dedup();
        out.extend(names);
        Ok(())
    }
    named::<Deployment>(client, &selector, uid, "Deployment", &mut left).await?;
    named::<ConfigMap>(client, &selector, uid, "ConfigMap", &mut left).await?;
    named::<ServiceAccount>(client, &selector, uid, "ServiceAccount", &mut left).await?;
    named::<RoleBinding>(client, &selector, uid, "RoleBinding", &mut left).await?;
    if system.reader_deployment(name).await?.is_some() {
        left.push(format!("Deployment/{name}-reader"));
    }
    for p in system.alive_readers(name) {
        left.push(format!("process {} (pid {:?}, terminating {})", p.name, p.pid, p.terminating));
    }
    left.sort();
    left.dedup();
    Ok(left)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_source_during_a_backlog_20_times_leaves_no_child_and_no_reader() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(5), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "e2e-delete", false, &options).await?;
    queue.send_batch(BACKLOG).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-delete-race");
    let system = System::start_with_operator(&dir).await?;
    let (seen, watching) = start_watching(&system.client);
    let sources: Api<SqsSource> = Api::default_namespaced(system.client.clone());

    let mut clean_after = Vec::new();
    for round in 0..ROUNDS {
        if queue.approximate_counts().await?.visible < LOW_WATER {
            queue.send_batch(BACKLOG).await?;
        }
        let name = format!("race-{round}");
        // Counted before the reader exists: a fast reader can drain what is visible before it is
        // reported ready, and no reader of an earlier round is left to add to the count.
        let delivered = sink.stats().accepted;
        let created = system.apply_source(&source_yaml(&name, &queue, &endpoint, &sink.url(), "a")).await?;
        let uid = created.uid().unwrap_or_default();
        system.wait_ready_readers(&name, 1, Duration::from_secs(60)).await?;
        poll::until(Duration::from_secs(30), Duration::from_millis(50), || async {
            Ok(Check::met_if(sink.stats().accepted > delivered, || {
                format!("{name}: the reader delivered nothing within 30 s; logs under {}", dir.display())
            }))
        })
        .await?;
        // Start a reconcile, then delete while it may still be applying.
        system.apply_source(&source_yaml(&name, &queue, &endpoint, &sink.url(), "b")).await?;
        tokio::time::sleep(Duration::from_millis((round as u64 * 7) % 60)).await;
        system.delete_source(&name).await?;
        let deleted_at = Instant::now();
        poll::until(CLEAN_WITHIN, Duration::from_millis(100), || async {
            let source_gone = sources.get_opt(&name).await?.is_none();
            let left = leftovers(&system, &name, &uid).await?;
            Ok(Check::met_if(source_gone && left.is_empty(), || {
                format!(
                    "round {round}: {CLEAN_WITHIN:?} after deleting {name}: source gone {source_gone}, left {left:?}; logs under {}",
                    dir.display()
                )
            }))
        })
        .await?;
        clean_after.push(deleted_at.elapsed());
    }
    // A late write would show up here even after the collector removed it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (readers_late, late): (Vec<Sighting>, Vec<Sighting>) =
        resurrections(&seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .into_iter()
            .partition(|s| s.by_reader);
    watching.abort();
    let mut millis: Vec<u128> = clean_after.iter().map(Duration::as_millis).collect();
    millis.sort_unstable();
    let stats = sink.stats();
    println!(
        "{ROUNDS} deletes during a backlog: clean after median {} ms, max {} ms; children the operator wrote after their source was gone: {}; reader leases created after it (collected): {}; sink accepted {} ({} distinct)",
        millis[millis.len() / 2],
        millis[millis.len() - 1],
        late.len(),
        readers_late.len(),
        stats.accepted,
        stats.distinct,
    );
    let by_kind: BTreeMap<&str, usize> = late.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.kind).or_default() += 1;
        m
    });
    let names: Vec<String> = late.iter().map(|s| format!("{}/{} (rv {})", s.kind, s.name, s.rv)).collect();
    assert!(late.is_empty(), "children written for a source already gone: {by_kind:?}: {names:?}");
    for round in 0..ROUNDS {
        let left = leftovers(&system, &format!("race-{round}"), "").await?;
        assert!(left.is_empty(), "race-{round}: {left:?}");
    }
    // A delete is not a failure: no `ReconcileFailed ... not found` Warning about any source.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(system.client.clone());
    let failed: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ReconcileFailed"))
        .map(|e| e.note.unwrap_or_default())
        .collect();
    println!("ReconcileFailed events: {}", failed.len());
    assert!(failed.is_empty(), "deletes reported as failures: {failed:?}");

    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
