//! Message ids this reader has received lately, to count redeliveries (`redelivered_messages_total`).
//!
//! Why bounded: the set lives as long as the process and sees every message; the oldest ids
//! are forgotten first, which only means a very late redelivery goes uncounted.

use std::collections::{HashSet, VecDeque};

pub struct SeenIds {
    capacity: usize,
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl SeenIds {
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), ids: HashSet::new(), order: VecDeque::new() }
    }

    /// Remember `id`; true when it was already remembered (a redelivery).
    pub fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return true;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_owned());
        self.order.push_back(id.to_owned());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_reported_and_old_ids_fall_out() {
        let mut seen = SeenIds::new(2);
        assert!(!seen.insert("a"));
        assert!(seen.insert("a"));
        assert!(!seen.insert("b"));
        assert!(!seen.insert("c")); // "a" falls out
        assert!(!seen.insert("a"));
        assert!(seen.insert("c"));
    }
}
