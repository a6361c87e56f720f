//! What the operator itself wrote to each source's children, so that its own writes start no
//! reconcile and an apply that would change nothing is not sent again.
//!
//! Why: the controller watches the children it owns so that one deleted or edited by someone else
//! is restored. But each of its own writes comes back through those watches (every child of a new
//! source, the Deployment twice, each of the autoscaler's replica changes), and the Deployment
//! controller's status writes start a reconcile too, as they must (the conditions read the
//! rollout). With a thousand sources arriving together those reconciles re-applied seven unchanged
//! objects each, a server-side apply each, and were most of the API server's work (BENCHMARKS.md,
//! "Many sources on one operator").
//!
//! How, two records per child:
//! - Echoes: every write's answer (and that of the finalizer's patch of a source) carries the child's new `resourceVersion`; a watch event carrying
//!   a version this process wrote is its own echo and starts no reconcile. Best effort: an echo
//!   that arrives before the answer is recorded starts a reconcile, and costs nothing but that.
//! - Applies: what each field manager last applied (a hash of the object) and when. A reconcile
//!   skips an apply whose object is the same as last time, unless someone else changed the child
//!   since the apply's request went out (a watch event that is not an echo; for a Deployment, one
//!   whose generation, labels, annotations or owners moved, not its status), or the apply is older
//!   than [`REAPPLY_AFTER`]. Every doubt falls on the side of applying: a restart of the operator
//!   or of a watch forgets or disturbs everything, and a change whose event is still on its way
//!   starts the reconcile that applies it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::Resource;
use serde::Serialize;

/// How many written versions are kept per child: a reconcile writes a child at most twice (the
/// Deployment: the apply and the autoscaler's hand-over), and an echo is seen within moments.
const KEPT_PER_CHILD: usize = 4;

/// An unchanged child is applied again after this long even with no sign of a change: the
/// PodDisruptionBudget and the register of reader accounts are not watched, and a missed watch
/// event should not leave a child unrestored for longer.
pub const REAPPLY_AFTER: Duration = Duration::from_secs(5 * 60);

/// How long the record of a deleted child is kept, so an apply under way when it was deleted is
/// not taken as having restored it.
const GONE_KEPT: Duration = Duration::from_secs(10 * 60);

/// The annotation the Deployment controller writes on each rollout; not the operator's.
const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";

/// (kind, namespace, name)
type Child = (String, String, String);

/// Shared by the reconciler and the autoscaler (which record) and the controller's watches of the
/// children (which ask and report).
#[derive(Clone, Debug, Default)]
pub struct OwnWrites(Arc<Mutex<Ledger>>);

#[derive(Debug, Default)]
struct Ledger {
    /// Counts changes by others, so "changed since" is one comparison.
    changes: u64,
    children: HashMap<Child, Entry>,
}

#[derive(Debug, Default)]
struct Entry {
    /// Versions this process wrote, oldest first.
    written: VecDeque<String>,
    /// The `changes` count at this child's last change by someone else.
    changed: u64,
    /// The metadata last seen, for kinds whose generation tells a spec change from a status write.
    shape: Option<u64>,
    /// What each field manager last applied.
    applied: HashMap<String, Applied>,
    /// When the child's deletion was seen.
    gone: Option<Instant>,
}

#[derive(Debug)]
struct Applied {
    hash: u64,
    /// The `changes` count when the apply's request went out.
    since: u64,
    at: Instant,
}

/// Taken just before an apply's request: a change by someone else after it makes the apply stale.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

/// What a watch saw happen to a child.
pub enum Seen<'a, K> {
    Applied(&'a K),
    Deleted(&'a K),
}

/// A stable hash of what would be applied (k8s-openapi's maps are ordered, so equal objects
/// serialize alike).
pub fn content_hash<K: Serialize>(object: &K) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_vec(object).unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

fn child_of<K: Resource<DynamicType = ()>>(object: &K) -> Option<Child> {
    let meta = object.meta();
    Some((K::kind(&()).into_owned(), meta.namespace.clone()?, meta.name.clone()?))
}

/// For kinds with a generation: what of the metadata only others change (a status write moves
/// none of it).
pub(crate) fn shape<K: Resource<DynamicType = ()>>(object: &K) -> Option<u64> {
    let meta = object.meta();
    let generation = meta.generation?;
    let annotations: BTreeMap<&String, &String> =
        meta.annotations.iter().flatten().filter(|(key, _)| key.as_str() != DEPLOYMENT_REVISION).collect();
    let owners = serde_json::to_vec(&meta.owner_references).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    (generation, &meta.labels, annotations, owners, meta.deletion_timestamp.is_some()).hash(&mut hasher);
    Some(hasher.finish())
}

impl OwnWrites {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a write's answer (the autoscaler's replica changes), so its echo starts no
    /// reconcile.
    pub fn wrote<K: Resource<DynamicType = ()>>(&self, answer: &K) {
        let Some(key) = child_of(answer) else { return };
        let Some(version) = answer.meta().resource_version.clone() else { return };
        let mut ledger = self.ledger();
        let entry = ledger.children.entry(key).or_default();
        entry.gone = None;
        if entry.written.back() != Some(&version) {
            entry.written.push_back(version);
        }
        while entry.written.len() > KEPT_PER_CHILD {
            entry.written.pop_front();
        }
    }

    /// Whether `object` (a source, whose finalizer the reconciler adds) is the echo of this
    /// process's write; unlike [`Self::saw`], keeps no record of objects it did not write.
    pub fn is_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let Some(key) = child_of(object) else { return false };
        let mut ledger = self.ledger();
        let Some(entry) = ledger.children.get_mut(&key) else { return false };
        let Some(at) = entry.written.iter().position(|v| Some(v) == object.meta().resource_version.as_ref())
        else {
            return false;
        };
        entry.written.drain(..=at);
        if entry.written.is_empty() && entry.applied.is_empty() && entry.gone.is_none() {
            ledger.children.remove(&key);
        }
        true
    }

    /// Taken before an apply's request.
    pub fn mark(&self) -> Mark {
        Mark(self.ledger().changes)
    }

    /// Whether `desired` (hashed: `hash`) is what `manager` last applied, no one else changed the
    /// child since, and the apply is younger than [`REAPPLY_AFTER`].
    pub fn unchanged<K: Resource<DynamicType = ()>>(&self, desired: &K, manager: &str, hash: u64) -> bool {
        let Some(key) = child_of(desired) else { return false };
        let ledger = self.ledger();
        let Some(entry) = ledger.children.get(&key) else { return false };
        entry.gone.is_none()
            && entry.applied.get(manager).is_some_and(|applied| {
                applied.hash == hash && entry.changed <= applied.since && applied.at.elapsed() < REAPPLY_AFTER
            })
    }

    /// Records the answer to an apply of an object hashed `hash` by `manager`, its request sent
    /// after `mark`.
    pub fn applied<K: Resource<DynamicType = ()>>(&self, answer: &K, manager: &str, hash: u64, mark: Mark) {
        self.wrote(answer);
        let Some(key) = child_of(answer) else { return };
        let mut ledger = self.ledger();
        let entry = ledger.children.entry(key).or_default();
        let applied = Applied { hash, since: mark.0, at: Instant::now() };
        entry.applied.insert(manager.to_owned(), applied);
    }

    /// Forgets what `manager` applied to `object`'s child: it has withdrawn it (a deleted source's
    /// entry in the unwatched register of reader accounts).
    pub fn withdrawn<K: Resource<DynamicType = ()>>(&self, object: &K, manager: &str) {
        let Some(key) = child_of(object) else { return };
        if let Some(entry) = self.ledger().children.get_mut(&key) {
            entry.applied.remove(manager);
        }
    }

    /// Takes in a watch event of a child; answers whether it should start a reconcile (whether it
    /// is not this process's own echo).
    pub fn saw<K: Resource<DynamicType = ()>>(&self, seen: Seen<'_, K>) -> bool {
        let mut ledger = self.ledger();
        match seen {
            Seen::Applied(object) => {
                let Some(key) = child_of(object) else { return true };
                let version = object.meta().resource_version.clone();
                let shape = shape(object);
                let next = ledger.changes + 1;
                let entry = ledger.children.entry(key).or_default();
                let echo = match entry.written.iter().position(|v| Some(v) == version.as_ref()) {
                    Some(at) => {
                        entry.written.drain(..=at);
                        true
                    }
                    None => false,
                };
                // A kind with a generation shows what of it others changed; for the others any
                // write but our own may have changed what we applied.
                let changed = !echo && (shape.is_none() || shape != entry.shape);
                entry.shape = shape;
                entry.gone = None;
                if changed {
                    entry.changed = next;
                    ledger.changes = next;
                }
                !echo
            }
            Seen::Deleted(object) => {
                let Some(key) = child_of(object) else { return true };
                let now = Instant::now();
                ledger.children.retain(|_, e| e.gone.is_none_or(|at| now.duration_since(at) < GONE_KEPT));
                ledger.changes += 1;
                let changed = ledger.changes;
                ledger.children.insert(key, Entry { changed, gone: Some(now), ..Entry::default() });
                true
            }
        }
    }
}

#[cfg(test)]
#[path = "own_writes_tests.rs"]
mod tests;
