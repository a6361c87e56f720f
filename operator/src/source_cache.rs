//! Every SqsSource, kept by one watch and shared by the operator's background tasks: the
//! autoscaler (which starts a scaling loop per source), the checkpoint coordinator, sink health and
//! replay.
//!
//! Why one watch for all four: each source's status is written several times while it is created
//! (the reconciler, the autoscaler, sink health), and a watch per task made every such write an
//! event the API server sent, and this process decoded, four times over; with a thousand sources
//! arriving together that was a large part of both processes' work (BENCHMARKS.md, "Many sources
//! on one operator"). The controller keeps a watch of its own: it reads the sources through an
//! error boundary (one object that does not parse must not stop the others) and filters the
//! events it reconciles on.
//!
//! Readiness and changes are told through a `tokio::sync::watch` channel, not kube-runtime's
//! `Store::wait_until_ready`, which wakes only the last of several tasks waiting at once.

use std::sync::Arc;

use kube::Client;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use sluice_crds::SqsSource;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::access::ApiCall;
use crate::scope::Scope;

/// The list and watch that fill the cache.
pub const API_CALLS: &[ApiCall] =
    &[ApiCall::new("sluice.dev", "sqssources", "list"), ApiCall::new("sluice.dev", "sqssources", "watch")];

/// The sources as last watched (field sets of `managedFields` dropped), and a counter of the
/// changes seen so far: `None` until the first list is complete.
#[derive(Clone)]
pub struct SourceCache {
    store: Store<SqsSource>,
    changes: watch::Receiver<Option<u64>>,
}

impl SourceCache {
    /// The cache, and the watch that fills it: the caller runs that future (the operator, once it
    /// leads: a standby keeps no cache); it ends with `stop`.
    pub fn new(
        client: &Client,
        scope: &Scope,
        stop: CancellationToken,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let (tell, changes) = watch::channel(None);
        let events = watcher(scope.api(client), watcher::Config::default())
            .default_backoff()
            .modify(crate::cache_watch::without_field_sets)
            .reflect(writer);
        let stale =
            "the autoscaler, checkpoint coordinator, sink health and replay act on the sources last seen";
        let watching =
            crate::cache_watch::follow(events, "sources", "SqsSources", stale, stop, move |event| {
                tell_change(&tell, event);
            });
        (Self { store, changes }, watching)
    }

    /// Waits until the first list is complete; `false` if the watch ended first (shutdown). Any
    /// number of tasks may wait at once.
    pub async fn ready(&self) -> bool {
        let mut changes = self.changes.clone();
        changes.wait_for(Option::is_some).await.is_ok()
    }

    /// Every source, once the first list is complete (see [`Self::ready`]).
    pub fn all(&self) -> Vec<Arc<SqsSource>> {
        self.store.state()
    }

    /// One source, if it is there.
    pub fn get(&self, key: &ObjectRef<SqsSource>) -> Option<Arc<SqsSource>> {
        self.store.get(key)
    }

    /// A receiver that wakes after each change once the first list is complete (several changes
    /// in a row may wake it once).
    pub fn changes(&self) -> watch::Receiver<Option<u64>> {
        self.changes.clone()
    }

    /// A cache filled by hand (tests), and the writer that fills it.
    #[cfg(test)]
    pub fn by_hand() -> (Self, impl FnMut(watcher::Event<SqsSource>)) {
        let (store, mut writer) = reflector::store();
        let (tell, changes) = watch::channel(None);
        let apply = move |event: watcher::Event<SqsSource>| {
            writer.apply_watcher_event(&event);
            tell_change(&tell, &event);
        };
        (Self { store, changes }, apply)
    }
}

/// Counts a change once the store holds a complete list (the events of a list before its end
/// are not changes anyone should act on: the store is filled only at `InitDone`).
fn tell_change(tell: &watch::Sender<Option<u64>>, event: &watcher::Event<SqsSource>) {
    match event {
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
        watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
            tell.send_modify(|count| *count = Some(count.map_or(0, |c| c + 1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fixtures::{BASIC, source};

    fn source_named(namespace: &str, name: &str) -> SqsSource {
        let mut source = source(BASIC);
        source.metadata.namespace = Some(namespace.to_owned());
        source.metadata.name = Some(name.to_owned());
        source
    }

    #[tokio::test]
    async fn every_task_waiting_for_the_first_list_goes_on_when_it_comes() {
        let (cache, mut apply) = SourceCache::by_hand();
        let waiting: Vec<_> = (0..20)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.ready().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(source_named("ns", "a")));
        apply(watcher::Event::InitDone);
        let woke = tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(waiting)).await;
        let Ok(results) = woke else { panic!("some tasks were never woken") };
        assert!(results.into_iter().all(|r| r.is_ok_and(|ready| ready)));
        assert_eq!(cache.all().len(), 1);
    }

    #[tokio::test]
    async fn a_list_in_progress_is_no_change_and_each_later_event_is() {
        let (cache, mut apply) = SourceCache::by_hand();
        let mut changes = cache.changes();
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(source_named("ns", "a")));
        assert!(!changes.has_changed().unwrap_or(true), "a partial list is not a change");
        apply(watcher::Event::InitDone);
        assert_eq!(*changes.borrow_and_update(), Some(0));
        apply(watcher::Event::Apply(source_named("ns", "b")));
        apply(watcher::Event::Delete(source_named("ns", "a")));
        assert_eq!(*changes.borrow_and_update(), Some(2));
        let names: Vec<String> =
            cache.all().iter().map(|s| kube::ResourceExt::name_any(s.as_ref())).collect();
        assert_eq!(names, ["b"]);
        assert!(cache.get(&ObjectRef::new("b").within("ns")).is_some());
    }
}
