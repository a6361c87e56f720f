//! The I/O of `SinksHealthy` and `status.readers`: every [`TICK`], list every reader's lease once;
//! for each source, write what each reader holds when it changed, compute the verdict from its
//! leases, and write the condition and an event when it changed.
//!
//! Why the source's own status as memory: the condition written last is what a new leader (or a
//! restarted operator) compares with, so a restart neither repeats an event nor misses one. The
//! status an event was last decided on is also kept in memory, so that a condition another writer
//! dropped is written again without a second event.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use sluice_crds::SqsSource;
use sluice_protocol::{SOURCE_LABEL, now_ms};
use tokio_util::sync::CancellationToken;

use super::held;
use super::verdict::{SinksVerdict, fresh_reports, verdict};
use super::{FIELD_MANAGER, SINKS_HEALTHY};
use crate::access::ApiCall;
use crate::condition_patch::{condition_patch, since};
use crate::error::kube_line;
use crate::scaler::drain::all_leases_selector;
use crate::scope::Scope;
use crate::source_cache::SourceCache;
use crate::source_ticks::{FailingSources, SourceTicks};

/// How often the reports are read. Readers write at most every 5 s, so a faster tick would see
/// nothing new.
pub const TICK: Duration = Duration::from_secs(5);

/// A list of the readers' lease ConfigMaps, the condition's patch (the sources come from the
/// operator's `SourceCache`); events through the Recorder (`events::API_CALLS`).
pub const API_CALLS: &[ApiCall] =
    &[ApiCall::new("", "configmaps", "list"), ApiCall::new("sluice.dev", "sqssources/status", "patch")];

/// The task: follows every source's sink health until `shutdown`.
pub fn run(
    client: Client,
    scope: Scope,
    cache: SourceCache,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    follow(client, scope, cache, shutdown)
}

async fn follow(client: Client, scope: Scope, cache: SourceCache, shutdown: CancellationToken) {
    let reporter =
        Reporter { controller: FIELD_MANAGER.to_owned(), instance: std::env::var("POD_NAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut ticks = SourceTicks::new(cache, TICK);
    // The status each source's condition last had, for events; first taken from the object.
    let mut known: HashMap<(String, String), String> = HashMap::new();
    let mut failing = FailingSources::default();
    let config_maps: Api<ConfigMap> = scope.api(&client);
    let all_leases = ListParams::default().labels(&all_leases_selector());
    while let Some(sources) = ticks.next(&shutdown).await {
        // One list of every reader's lease for the tick, not one per source: most sources of a
        // large fleet are at zero replicas and have none.
        let leases = match config_maps.list(&all_leases).await {
            Ok(list) => by_source(list.items),
            Err(error) => {
                let error = kube_line(&error);
                tracing::warn!(%error, "sink health: cannot list the readers' leases; SinksHealthy conditions go stale this tick");
                continue;
            }
        };
        let none = Vec::new();
        let keys: Vec<_> =
            sources.iter().map(|s| (s.namespace().unwrap_or_default(), s.name_any())).collect();
        known.retain(|key, _| keys.contains(key));
        failing.retain(&keys.iter().cloned().collect());
        for source in sources.iter().filter(|s| s.meta().deletion_timestamp.is_none()) {
            let key = (source.namespace().unwrap_or_default(), source.name_any());
            let before = known.get(&key).cloned().or_else(|| current(source).map(|c| c.status.clone()));
            let data = leases.get(&key).unwrap_or(&none);
            let result =
                step(&client, &recorder, source, data, before.as_deref()).await.map_err(|e| kube_line(&e));
            if let Some(Some(status)) = failing.record(&key, result, "sink health: updating SinksHealthy") {
                known.insert(key, status);
            }
        }
    }
}

/// The leases' data by (namespace, source), from their source label.
fn by_source(leases: Vec<ConfigMap>) -> HashMap<(String, String), Vec<BTreeMap<String, String>>> {
    let mut grouped: HashMap<_, Vec<_>> = HashMap::new();
    for lease in leases {
        let namespace = lease.namespace().unwrap_or_default();
        let source = lease.labels().get(SOURCE_LABEL).cloned();
        if let (Some(source), Some(data)) = (source, lease.data) {
            grouped.entry((namespace, source)).or_default().push(data);
        }
    }
    grouped
}

/// Writes `status.readers` and `status.held` from the readers' reports when they differ from the
/// status.
async fn write_held<'a>(
    client: &Client,
    source: &SqsSource,
    namespace: &str,
    leases: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    now_ms: i64,
) -> Result<(), kube::Error> {
    let max_readers = usize::try_from(source.spec.scaling.max_replicas).unwrap_or(0).max(1);
    let readers = held::readers(leases, now_ms, max_readers);
    if held::shown(source, &readers) {
        return Ok(());
    }
    let sources: Api<SqsSource> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(held::FIELD_MANAGER).force();
    sources.patch_status(&source.name_any(), &params, &Patch::Apply(held::apply_body(&readers))).await?;
    Ok(())
}

/// The source's `SinksHealthy` condition as last written.
fn current(source: &SqsSource) -> Option<&Condition> {
    source.status.as_ref()?.conditions.iter().find(|c| c.type_ == SINKS_HEALTHY)
}

/// One source: the verdict, written when it changed; answers the status it now has (`None`
/// while the source has no conditions yet: the reconciler writes them first).
async fn step(
    client: &Client,
    recorder: &Recorder,
    source: &SqsSource,
    leases: &[BTreeMap<String, String>],
    before: Option<&str>,
) -> Result<Option<String>, kube::Error> {
    let (Some(namespace), Some(status)) = (source.namespace(), source.status.as_ref()) else {
        return Ok(None);
    };
    let name = source.name_any();
    let data: Vec<_> = leases.iter().collect();
    let at = now_ms();
    if let Err(error) = write_held(client, source, &namespace, data.iter().copied(), at).await {
        tracing::warn!(%namespace, source = %name, %error, "cannot update status.readers; it goes stale");
    }
    let now = verdict(&source.spec, &fresh_reports(data, at));
    let previous = current(source);
    if previous.is_some_and(|c| c.status == now.status && c.reason == now.reason && c.message == now.message)
    {
        return Ok(Some(now.status.to_owned()));
    }
    let since = since(previous, now.status, Timestamp::now());
    let condition = Condition {
        type_: SINKS_HEALTHY.to_owned(),
        status: now.status.to_owned(),
        reason: now.reason.to_owned(),
        message: now.message.clone(),
        last_transition_time: since,
        observed_generation: source.meta().generation,
    };
    let Some(patch) = condition_patch(&status.conditions, &condition) else {
        // The reconciler has not written its conditions yet (see `condition_patch`).
        return Ok(None);
    };
    let patch: json_patch::Patch = serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    let sources: Api<SqsSource> = Api::namespaced(client.clone(), &namespace);
    sources.patch_status(&name, &params, &Patch::Json::<()>(patch)).await?;
    if let Some(event) = transition(before, &now) {
        tracing::info!(namespace = %namespace, source = %name, "{}", now.message);
        if let Err(error) = recorder.publish(&event, &source.object_ref(&())).await {
            tracing::warn!(%error, "sink health: cannot publish the event");
        }
    }
    Ok(Some(now.status.to_owned()))
}

/// The event for a change of status: a Warning into False, a Normal back to True from False;
/// nothing for a message change within a status, nor to or from Unknown but into False.
pub fn transition(previous: Option<&str>, now: &SinksVerdict) -> Option<Event> {
    let (type_, reason) = match (previous, now.status) {
        (Some("False"), "False") => return None,
        (_, "False") => (EventType::Warning, "SinksUnhealthy"),
        (Some("False"), "True") => (EventType::Normal, "SinksHealthy"),
        _ => return None,
    };
    Some(Event {
        type_,
        reason: reason.to_owned(),
        note: Some(now.message.chars().take(1000).collect()),
        action: "SinkHealth".to_owned(),
        secondary: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(status: &'static str) -> SinksVerdict {
        SinksVerdict { status, reason: "R", message: "m".into() }
    }

    #[test]
    fn an_event_on_each_transition_into_false_and_back() {
        assert_eq!(transition(Some("True"), &v("False")).map(|e| e.reason), Some("SinksUnhealthy".into()));
        assert_eq!(transition(None, &v("False")).map(|e| e.type_), Some(EventType::Warning));
        assert_eq!(transition(Some("False"), &v("True")).map(|e| e.reason), Some("SinksHealthy".into()));
        assert!(transition(Some("False"), &v("False")).is_none(), "a new message is not a transition");
        assert!(transition(Some("Unknown"), &v("True")).is_none());
        assert!(transition(None, &v("Unknown")).is_none());
    }
}
