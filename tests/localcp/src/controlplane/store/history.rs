//! The bounded change log that watches replay from.
//!
//! etcd keeps a window of revisions and answers older ones with 410 Gone; clients (kube-runtime's
//! watcher) react by re-listing. Keeping a ring of the last N events reproduces that contract, and makes
//! it testable by choosing a small N.

use std::collections::VecDeque;

use serde_json::Value;

use crate::controlplane::error::ApiError;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed (the object is its last state).
    Deleted,
}

impl EventType {
    /// The `type` field of a watch event.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, stamped with the resourceVersion it produced.
#[derive(Debug, Clone)]
pub struct Event {
    /// Global resourceVersion after this change.
    pub rv: u64,
    /// Kind of change.
    pub kind: EventType,
    /// API group of the object.
    pub group: String,
    /// Plural of the object's type.
    pub plural: String,
    /// The object after the change (before it, for deletes).
    pub object: Value,
}

/// The last `capacity` events.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Event>,
    capacity: usize,
    compacted: u64,
}

impl History {
    /// An empty history keeping at most `capacity` events (at least one).
    pub fn new(capacity: usize) -> Self {
        Self { events: VecDeque::new(), capacity: capacity.max(1), compacted: 0 }
    }

    /// Appends an event, forgetting the oldest when full.
    pub fn push(&mut self, event: Event) {
        if self.events.len() == self.capacity
            && let Some(dropped) = self.events.pop_front()
        {
            self.compacted = dropped.rv;
        }
        self.events.push_back(event);
    }

    /// Events after `rv`, or `410 Expired` if some of them were forgotten.
    pub fn after(&self, rv: u64) -> Result<impl Iterator<Item = &Event>, ApiError> {
        if rv < self.compacted {
            return Err(ApiError::expired(rv, self.compacted));
        }
        Ok(self.events.iter().filter(move |e| e.rv > rv))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(rv: u64) -> Event {
        Event { rv, kind: EventType::Added, group: String::new(), plural: "pods".into(), object: Value::Null }
    }

    #[test]
    fn replays_retained_and_expires_forgotten() {
        let mut h = History::new(2);
        for rv in 1..=3 {
            h.push(ev(rv));
        }
        let rvs: Vec<u64> = h.after(1).unwrap().map(|e| e.rv).collect();
        assert_eq!(rvs, vec![2, 3]);
        assert_eq!(h.after(3).unwrap().count(), 0);
        assert_eq!(h.after(0).err().unwrap().code, 410);
    }
}
