//! Coordination through the Kubernetes API: the own lease ConfigMap `<source>-lease-<pod>`
//! (created or taken over, renewed, every write a compare-and-swap on resourceVersion) and the
//! operator's checkpoint ConfigMap `<source>-checkpoint` (polled).
//!
//! Why renewal is gated on visibility: another reader may receive a message this reader holds only
//! once this reader can no longer take part in a commit. So a renewal never makes the lease outlast
//! the visibility of the held receipts (`visibility_covered_until`, reported by the heartbeat); if
//! the heartbeat falls behind, the lease runs out and the operator fences this incarnation.
//!
//! Why polling the checkpoint: one small GET per poll, no watch to re-establish; the poll period
//! adds at most that much to the commit latency.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use sluice_protocol::now_ms;
use sluice_protocol::{
    Checkpoint, Epoch, IdSet, Incarnation, Lease, ROLE_LABEL, Redelivery, SOURCE_LABEL, can_rejoin,
    checkpoint_configmap_name, classify, lease_configmap_name, rejoin,
};
use tokio_util::sync::CancellationToken;

use super::health_report;
use crate::exactly_once::{Backend, CoordinationError, Entries, Observed, Result};
use crate::process::backoff::retry;
use crate::process::health::ApiCall;
use crate::settle::held_report::ReaderReport;

/// How often the checkpoint ConfigMap is read.
pub const CHECKPOINT_POLL: Duration = Duration::from_millis(250);
/// One WARN line per this many failed checkpoint reads in a row (10 s at [`CHECKPOINT_POLL`]).
const CHECKPOINT_WARN_EVERY: u64 = 40;
/// Backoff between attempts to take the lease over (the previous incarnation must be fenced).
const TAKEOVER_RETRY: Duration = Duration::from_millis(500);
const TAKEOVER_RETRY_LONGEST: Duration = Duration::from_secs(1);

/// Where this reader's lease lives.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub namespace: String,
    /// The SqsSource name.
    pub source: String,
    /// The SqsSource's uid (env `SLUICE_SOURCE_UID`, set by the operator): the lease ConfigMap's
    /// owner, so the garbage collector removes it with the source. Empty: no owner.
    pub source_uid: String,
    pub pod: String,
    /// Must be shorter than the queue's visibility timeout (PROTOCOL.md "lease and visibility").
    pub lease_duration: Duration,
    /// What the lease ConfigMap carries beside the lease: the reader's report.
    pub report: Arc<ReaderReport>,
}

/// The lease as last written, with the resourceVersion the next write must match.
struct Held {
    lease: Lease,
    resource_version: String,
}

/// The Kubernetes backend.
pub struct Cluster {
    config: ClusterConfig,
    config_maps: Api<ConfigMap>,
    held: tokio::sync::Mutex<Held>,
    incarnation: AtomicU64,
    covered_until: AtomicI64,
    /// Expiry of the lease as last written (renewal or take-over), for `lease_valid_until_ms`.
    valid_until: AtomicI64,
    figures: Mutex<(u64, u64, bool)>,
    observed: Observed,
}

/// The lease ConfigMap object for `lease`, with this reader's sink health (`health_report`) and
/// what it holds (`settle::held_report::ReaderReport`), so that under exactlyOnce every renewal reports them too
/// without a write of its own (a second writer would break the lease's compare-and-swap).
pub fn lease_object(
    config: &ClusterConfig,
    lease: &Lease,
    resource_version: Option<String>,
) -> Result<ConfigMap> {
    let mut data = lease.to_data()?;
    let now = now_ms();
    data.extend([health_report::entry_of(&config.report, now)]);
    data.extend(config.report.held_entry(&config.pod, now));
    Ok(ConfigMap {
        metadata: lease_metadata(config, resource_version),
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// Name, labels and owner of this reader's lease ConfigMap: what the reader policy
/// (deploy/policy) requires of the one object a reader may write.
pub fn lease_metadata(config: &ClusterConfig, resource_version: Option<String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(lease_configmap_name(&config.source, &config.pod)),
        namespace: Some(config.namespace.clone()),
        labels: Some(BTreeMap::from([
            (SOURCE_LABEL.to_owned(), config.source.clone()),
            (ROLE_LABEL.to_owned(), "lease".to_owned()),
        ])),
        owner_references: (!config.source_uid.is_empty()).then(|| {
            vec![OwnerReference {
                api_version: <sluice_crds::SqsSource as kube::Resource>::api_version(&()).into_owned(),
                kind: <sluice_crds::SqsSource as kube::Resource>::kind(&()).into_owned(),
                name: config.source.clone(),
                uid: config.source_uid.clone(),
                // Not blocking: that would need `update` on the source's finalizers, which
                // readers are not granted; and not the controller (the operator is not).
                block_owner_deletion: None,
                controller: None,
            }]
        }),
        resource_version,
        ..ObjectMeta::default()
    }
}

/// Reads a checkpoint ConfigMap; `None` until the operator wrote its keys.
pub fn checkpoint_of(cm: Option<&ConfigMap>) -> Result<Option<Checkpoint>> {
    match cm.and_then(|cm| cm.data.as_ref()) {
        Some(data) if data.contains_key("openEpoch") => Ok(Some(Checkpoint::from_data(data)?)),
        _ => Ok(None),
    }
}

impl From<kube::Error> for CoordinationError {
    fn from(error: kube::Error) -> Self {
        CoordinationError::Api(super::api_line::api_line(&error))
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 409)
}

impl Cluster {
    /// Takes the own lease (a fresh one, or over a previous incarnation's once the operator fenced
    /// it), then renews it and follows the checkpoint until `stop`. Answers the committed entries
    /// carried over, for `Driver::start`.
    pub async fn join(
        client: Client,
        config: ClusterConfig,
        stop: CancellationToken,
    ) -> Result<(Arc<Self>, BTreeMap<(Incarnation, Epoch), IdSet>)> {
        let config_maps: Api<ConfigMap> = Api::namespaced(client, &config.namespace);
        let held = take_over(&config_maps, &config, &stop).await?;
        let inherited = held.lease.ids.clone();
        let valid_until = held.lease.expires_at_ms();
        let cluster = Arc::new(Cluster {
            incarnation: AtomicU64::new(held.lease.incarnation.0),
            config,
            config_maps,
            held: tokio::sync::Mutex::new(held),
            covered_until: AtomicI64::new(i64::MAX),
            valid_until: AtomicI64::new(valid_until),
            figures: Mutex::new((0, 0, false)),
            observed: Observed::default(),
        });
        tokio::spawn(cluster.clone().poll_checkpoint(stop.clone()));
        tokio::spawn(cluster.clone().renew(stop));
        Ok((cluster, inherited))
    }

    /// One compare-and-swap of the own lease. A conflict means someone else wrote it: lost.
    async fn write(&self, change: impl FnOnce(&mut Lease)) -> Result<()> {
        self.write_as(None, change).await
    }

    /// [`Cluster::write`], only while the held lease is `expected`'s (checked under the same lock
    /// as the write, so a rejoin cannot slip in between).
    async fn write_as(&self, expected: Option<Incarnation>, change: impl FnOnce(&mut Lease)) -> Result<()> {
        let mut held = self.held.lock().await;
        if expected.is_some_and(|e| e != held.lease.incarnation) {
            return Err(CoordinationError::Conflict);
        }
        // A lease that ran out on our own clock may already be fenced: a paused process that
        // resumes (a zombie) must not write as if it still held it.
        if now_ms() >= held.lease.expires_at_ms() {
            self.observed.set_lost(true);
            return Err(CoordinationError::Conflict);
        }
        let mut lease = held.lease.clone();
        change(&mut lease);
        let object = lease_object(&self.config, &lease, Some(held.resource_version.clone()))?;
        let name = lease_configmap_name(&self.config.source, &self.config.pod);
        match self.config_maps.replace(&name, &PostParams::default(), &object).await {
            Ok(written) => {
                held.resource_version = written.resource_version().unwrap_or_default();
                self.valid_until.store(lease.expires_at_ms(), Ordering::Relaxed);
                held.lease = lease;
                Ok(())
            }
            Err(e) if is_conflict(&e) => {
                self.observed.set_lost(true);
                Err(CoordinationError::Conflict)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn renew(self: Arc<Self>, stop: CancellationToken) {
        let period = self.config.lease_duration / 3;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            if self.observed.is_lost() {
                continue;
            }
            let now = now_ms();
            let expires_at = self.held.lock().await.lease.expires_at_ms();
            if now >= expires_at {
                tracing::warn!("own lease ran out before it was renewed; this incarnation is done");
                self.observed.set_lost(true);
                continue;
            }
            let duration_ms = self.config.lease_duration.as_millis() as i64;
            if self.covered_until.load(Ordering::Relaxed) < now + duration_ms {
                tracing::warn!("held messages are not invisible for a whole lease; not renewing");
                continue;
            }
            let (drain, in_flight, draining) = *self.figures.lock().unwrap_or_else(|p| p.into_inner());
            if draining {
                self.config.report.set_draining();
            }
            let result = self
                .write(|lease| {
                    lease.renewed_at_ms = now;
                    lease.drain_millis_per_second = drain;
                    lease.in_flight = in_flight;
                    lease.draining = draining;
                })
                .await;
            match result {
                Ok(()) => self.config.report.api_answered(ApiCall::LeaseRenewal),
                Err(error) => {
                    self.config.report.api_failed(ApiCall::LeaseRenewal, &error.to_string());
                    tracing::warn!(%error, "lease renewal failed; commits wait until the API takes it");
                }
            }
        }
    }

    async fn poll_checkpoint(self: Arc<Self>, stop: CancellationToken) {
        let name = checkpoint_configmap_name(&self.config.source);
        let mut failures: u64 = 0;
        loop {
            match self
                .config_maps
                .get_opt(&name)
                .await
                .map_err(CoordinationError::from)
                .and_then(|cm| checkpoint_of(cm.as_ref()))
            {
                Ok(found) => {
                    if failures > 0 {
                        tracing::info!(failures, "the checkpoint is read again");
                        self.config.report.api_answered(ApiCall::CheckpointRead);
                    }
                    failures = 0;
                    if let Some(cp) = found {
                        self.observed.checkpoint(cp);
                    }
                }
                Err(error) => {
                    failures += 1;
                    self.config.report.api_failed(ApiCall::CheckpointRead, &error.to_string());
                    // The first failure, then one line per WARN_EVERY polls: a poll every
                    // 250 ms must not flood the log through an API outage.
                    if failures % CHECKPOINT_WARN_EVERY == 1 {
                        tracing::warn!(
                            %error,
                            failures,
                            "cannot read the checkpoint ConfigMap {name} ({failures} failed reads in a row); commits wait until it is read again, receiving and delivering go on while the lease holds"
                        );
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(CHECKPOINT_POLL) => {}
            }
        }
    }
}

/// One attempt at taking the lease: `None` when the previous incarnation is not fenced yet or
/// someone wrote in between.
async fn try_take(
    config_maps: &Api<ConfigMap>,
    config: &ClusterConfig,
    name: &str,
    duration_s: u32,
    incarnation: Incarnation,
) -> Result<Option<Held>> {
    let name = name.to_owned();

    let checkpoint =
        checkpoint_of(config_maps.get_opt(&checkpoint_configmap_name(&config.source)).await?.as_ref())?
            .unwrap_or_else(|| Checkpoint::initial(0));
    let (lease, rv) = match config_maps.get_opt(&name).await? {
        Some(cm) => {
            let old = Lease::from_data(cm.data.as_ref().unwrap_or(&BTreeMap::new()))?;
            if !can_rejoin(&checkpoint, &old) {
                return Ok(None);
            }
            let (mut lease, _) = rejoin(&checkpoint, &old, incarnation, now_ms());
            lease.lease_duration_seconds = duration_s;
            (lease, cm.resource_version())
        }
        None => (Lease::new(&config.pod, incarnation, now_ms(), duration_s), None),
    };
    let object = lease_object(config, &lease, rv.clone())?;
    let written = match rv {
        Some(_) => config_maps.replace(&name, &PostParams::default(), &object).await,
        None => config_maps.create(&PostParams::default(), &object).await,
    };
    match written {
        Ok(cm) => Ok(Some(Held { lease, resource_version: cm.resource_version().unwrap_or_default() })),
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(CoordinationError::from(e)),
    }
}

/// Creates the lease, or takes it over from a previous incarnation once that one is fenced.
async fn take_over(
    config_maps: &Api<ConfigMap>,
    config: &ClusterConfig,
    stop: &CancellationToken,
) -> Result<Held> {
    let name = lease_configmap_name(&config.source, &config.pod);
    let duration_s = config.lease_duration.as_secs().max(1) as u32;
    let attempt = || async {
        match try_take(config_maps, config, &name, duration_s, Incarnation::generate()).await {
            Ok(Some(held)) => Ok(held),
            Ok(None) => Err(None),
            Err(error) => Err(Some(error)),
        }
    };
    // Retried every second while the API is away: one WARN for the spell, the rest at DEBUG (the
    // failures still count in the metric and show in /readyz).
    let failed = AtomicU64::new(0);
    let not_yet = |error: &Option<CoordinationError>| {
        match error {
            None => tracing::debug!("previous incarnation not fenced yet; waiting"),
            Some(error) => {
                config.report.api_failed(ApiCall::LeaseRenewal, &error.to_string());
                if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(%error, "cannot take the lease yet; retrying every second until the API takes it");
                } else {
                    tracing::debug!(%error, "cannot take the lease yet");
                }
            }
        }
        true
    };
    let held = retry(TAKEOVER_RETRY, TAKEOVER_RETRY_LONGEST, None, stop, attempt, not_yet)
        .await
        .ok_or(CoordinationError::Closed)?;
    let failed_attempts = failed.load(Ordering::Relaxed);
    tracing::info!(
        incarnation = %held.lease.incarnation,
        carried = held.lease.ids.len(),
        failed_attempts,
        "lease taken"
    );
    Ok(held)
}

impl Backend for Cluster {
    fn lease_valid_until_ms(&self) -> i64 {
        if self.observed.is_lost() {
            return i64::MIN;
        }
        self.valid_until.load(Ordering::Relaxed)
    }

    fn leave(&self) -> BoxFuture<'_, Result<()>> {
        async move {
            // Expire the lease now (one compare-and-swap) rather than delete it: readers hold no
            // `delete` on ConfigMaps (see the operator's build/rbac.rs), and an expired lease is
            // fenced by the coordinator's next step, which is all the barrier needs. The report
            // it carries says draining too, for status.readers.
            self.config.report.set_draining();
            let result = self
                .write_as(Some(self.incarnation()), |lease| {
                    lease.renewed_at_ms = 0;
                    lease.draining = true;
                    lease.in_flight = 0;
                })
                .await;
            self.observed.set_lost(true);
            result
        }
        .boxed()
    }

    fn pod(&self) -> &str {
        &self.config.pod
    }

    fn incarnation(&self) -> Incarnation {
        Incarnation(self.incarnation.load(Ordering::Relaxed))
    }

    fn observed(&self) -> &Observed {
        &self.observed
    }

    fn write_ack(
        &self,
        incarnation: Incarnation,
        through: Epoch,
        entries: Vec<(Epoch, IdSet)>,
    ) -> BoxFuture<'_, Result<()>> {
        async move {
            self.write_as(Some(incarnation), |lease| {
                lease.acked_epoch = through;
                for (epoch, ids) in entries {
                    lease.ids.insert((incarnation, epoch), ids);
                }
            })
            .await
        }
        .boxed()
    }

    fn forget(&self, incarnation: Incarnation, epoch: Epoch) -> BoxFuture<'_, Result<()>> {
        async move { self.write(|lease| drop(lease.ids.remove(&(incarnation, epoch)))).await }.boxed()
    }

    fn rejoin(&self) -> BoxFuture<'_, Result<(Incarnation, Entries)>> {
        async move {
            let mut held = self.held.lock().await;
            let stop = CancellationToken::new();
            let fresh = take_over(&self.config_maps, &self.config, &stop).await?;
            let inherited = fresh.lease.ids.clone();
            let incarnation = fresh.lease.incarnation;
            self.valid_until.store(fresh.lease.expires_at_ms(), Ordering::Relaxed);
            *held = fresh;
            self.incarnation.store(incarnation.0, Ordering::Relaxed);
            self.observed.set_lost(false);
            self.config.report.api_answered(ApiCall::LeaseRenewal);
            Ok((incarnation, inherited))
        }
        .boxed()
    }

    fn classify(&self, id: &str, receive_count: u32) -> BoxFuture<'_, Result<Redelivery>> {
        let items = vec![(id.to_owned(), receive_count)];
        async move { Ok(self.classify_many(items).await?.pop().unwrap_or(Redelivery::Undecided)) }.boxed()
    }

    fn classify_many(&self, items: Vec<(String, u32)>) -> BoxFuture<'_, Result<Vec<Redelivery>>> {
        async move {
            // A first receive cannot be in any lease: only redeliveries need the (fresh) read, and
            // one read serves the whole batch.
            if items.iter().all(|(_, count)| *count <= 1) {
                return Ok(vec![Redelivery::Fresh; items.len()]);
            }
            let selector = format!("{SOURCE_LABEL}={},{ROLE_LABEL}=lease", self.config.source);
            let leases = self.config_maps.list(&ListParams::default().labels(&selector)).await?;
            // Leases first, then the checkpoint (PROTOCOL.md "redelivered messages").
            let checkpoint = checkpoint_of(
                self.config_maps.get_opt(&checkpoint_configmap_name(&self.config.source)).await?.as_ref(),
            )?;
            let Some(checkpoint) = checkpoint else { return Ok(vec![Redelivery::Fresh; items.len()]) };
            let parsed: Vec<Lease> = leases
                .items
                .iter()
                .filter_map(|cm| cm.data.as_ref())
                .filter_map(|d| Lease::from_data(d).ok())
                .collect();
            Ok(items
                .iter()
                .map(
                    |(id, count)| {
                        if *count <= 1 { Redelivery::Fresh } else { classify(id, &checkpoint, &parsed) }
                    },
                )
                .collect())
        }
        .boxed()
    }

    fn visibility_covered_until(&self, until_ms: i64) {
        self.covered_until.store(until_ms, Ordering::Relaxed);
    }

    fn report(&self, drain_millis_per_second: u64, in_flight: u64, draining: bool) {
        *self.figures.lock().unwrap_or_else(|p| p.into_inner()) =
            (drain_millis_per_second, in_flight, draining);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig {
            namespace: "ns".into(),
            source: "orders".into(),
            source_uid: "uid-1".into(),
            pod: "orders-reader-x".into(),
            lease_duration: Duration::from_secs(10),
            report: Arc::new(ReaderReport::new(Arc::default(), Arc::default())),
        }
    }

    #[test]
    fn the_lease_object_is_labelled_for_the_operator_and_pins_the_version() {
        let lease = Lease::new("orders-reader-x", Incarnation(1), 0, 10);
        let cm = lease_object(&config(), &lease, Some("7".into())).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("orders-lease-orders-reader-x"));
        assert_eq!(cm.metadata.resource_version.as_deref(), Some("7"));
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels[SOURCE_LABEL], "orders");
        assert_eq!(labels[ROLE_LABEL], "lease");
        let owners = cm.metadata.owner_references.clone().unwrap();
        assert_eq!((owners[0].kind.as_str(), owners[0].uid.as_str()), ("SqsSource", "uid-1"));
        assert_eq!(owners[0].block_owner_deletion, None, "readers may not block the source's deletion");
        assert_eq!(Lease::from_data(&cm.data.unwrap()).unwrap(), lease);
    }

    #[test]
    fn a_checkpoint_without_the_coordinator_keys_is_not_yet_there() {
        let scaler_only = ConfigMap {
            data: Some(BTreeMap::from([("replicas".to_string(), "2".to_string())])),
            ..ConfigMap::default()
        };
        assert_eq!(checkpoint_of(Some(&scaler_only)).unwrap(), None);
        assert_eq!(checkpoint_of(None).unwrap(), None);
        let written = ConfigMap { data: Some(Checkpoint::initial(3).to_data()), ..ConfigMap::default() };
        assert_eq!(checkpoint_of(Some(&written)).unwrap(), Some(Checkpoint::initial(3)));
    }
}
