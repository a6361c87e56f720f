//! The children's versions the reconciler wrote itself, so that the watch events of its own writes
//! do not start another reconcile of the same source.
//!
//! Why: the controller watches the children it owns so that one deleted or edited by someone else
//! is restored. But each of its own applies that changes a child (every child of a new source, the
//! Deployment twice) comes back through those watches, and each would start one more reconcile that
//! applies the same seven objects again to no effect. With a thousand sources arriving together
//! those echoes were most of the reconciles (BENCHMARKS.md, "Many sources on one operator").
//!
//! How: every apply's answer carries the child's new `resourceVersion`; a watch event carrying a
//! version this process wrote is its own echo and is dropped. Anything else (another writer, the
//! Deployment controller's status, a deletion, whose event carries the deletion's version) still
//! starts a reconcile. Best effort by design: an echo that arrives before the apply's answer is
//! recorded starts a reconcile, as every echo did before, and costs nothing but that.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use kube::Resource;

/// How many versions are kept per child: a reconcile writes a child at most twice (the Deployment:
/// the apply and the autoscaler's hand-over), and an echo is seen within moments.
const KEPT_PER_CHILD: usize = 4;

/// (kind, namespace, name)
type Child = (String, String, String);

/// Shared by the reconciler (which records) and the controller's watches of the children (which ask).
#[derive(Clone, Debug, Default)]
pub struct OwnWrites(Arc<Mutex<HashMap<Child, VecDeque<String>>>>);

fn child_of<K: Resource<DynamicType = ()>>(object: &K) -> Option<(Child, String)> {
    let meta = object.meta();
    let key = (K::kind(&()).into_owned(), meta.namespace.clone()?, meta.name.clone()?);
    Some((key, meta.resource_version.clone()?))
}

impl OwnWrites {
    /// Records `object` as the server answered an apply of it.
    pub fn wrote<K: Resource<DynamicType = ()>>(&self, object: &K) {
        let Some((key, version)) = child_of(object) else { return };
        let mut written = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let versions = written.entry(key).or_default();
        if versions.back() != Some(&version) {
            versions.push_back(version);
        }
        while versions.len() > KEPT_PER_CHILD {
            versions.pop_front();
        }
    }

    /// Whether a watched `object` is the echo of one of this process's writes. An echo is answered
    /// once: the version and any older ones recorded for the child are forgotten.
    pub fn is_echo<K: Resource<DynamicType = ()>>(&self, object: &K) -> bool {
        let Some((key, version)) = child_of(object) else { return false };
        let mut written = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(versions) = written.get_mut(&key) else { return false };
        let Some(at) = versions.iter().position(|v| *v == version) else { return false };
        versions.drain(..=at);
        if versions.is_empty() {
            written.remove(&key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn at<K: Resource<DynamicType = ()> + Default>(name: &str, version: &str) -> K {
        let mut object = K::default();
        *object.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        };
        object
    }

    #[test]
    fn the_echo_of_an_own_write_is_dropped_once_and_other_writes_pass() {
        let own = OwnWrites::default();
        own.wrote(&at::<Deployment>("orders-reader", "10"));
        own.wrote(&at::<Deployment>("orders-reader", "11"));
        assert!(own.is_echo(&at::<Deployment>("orders-reader", "10")));
        assert!(own.is_echo(&at::<Deployment>("orders-reader", "11")));
        assert!(!own.is_echo(&at::<Deployment>("orders-reader", "11")), "an echo is answered once");
        // The Deployment controller's status write, and a deletion, carry versions of their own.
        assert!(!own.is_echo(&at::<Deployment>("orders-reader", "12")));
    }

    #[test]
    fn a_later_echo_forgets_earlier_versions_and_kinds_are_apart() {
        let own = OwnWrites::default();
        for version in ["1", "2", "3"] {
            own.wrote(&at::<ConfigMap>("orders-config", version));
        }
        assert!(!own.is_echo(&at::<Deployment>("orders-config", "3")), "same name, other kind");
        assert!(own.is_echo(&at::<ConfigMap>("orders-config", "3")));
        assert!(!own.is_echo(&at::<ConfigMap>("orders-config", "1")), "older than an echo seen");
        assert!(own.0.lock().unwrap().is_empty());
    }

    #[test]
    fn only_the_last_few_versions_of_a_child_are_kept() {
        let own = OwnWrites::default();
        for version in 1..=10 {
            own.wrote(&at::<ConfigMap>("orders-config", &version.to_string()));
        }
        // An unchanged apply answers the version it had: recorded once.
        own.wrote(&at::<ConfigMap>("orders-config", "10"));
        let kept: Vec<String> = own.0.lock().unwrap().values().flatten().cloned().collect();
        assert_eq!(kept, ["7", "8", "9", "10"]);
    }
}
