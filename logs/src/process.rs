//! Fields that belong to the whole process rather than to a span.
//!
//! Why not a root span: a span is only the current one in the task that entered it, and tokio
//! does not carry it into tasks spawned from there; the reader spawns its pollers, deliveries,
//! acker, lease and checkpoint tasks from many places, so a root span would name the source on
//! some lines and not on others. Fields set here are on every JSON line, whichever task logs it.

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

/// Set once (later calls are ignored), read by every JSON line; cheap to clone.
#[derive(Clone, Default)]
pub struct ProcessFields(Arc<OnceLock<Map<String, Value>>>);

impl ProcessFields {
    /// Name the process's fields, e.g. `[("source", "orders"), ("namespace", "shop")]`; empty
    /// values are left out.
    pub fn set<'a>(&self, fields: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let map = fields
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(key, value)| (key.to_owned(), Value::String(value.to_owned())))
            .collect();
        let _ = self.0.set(map);
    }

    pub(crate) fn get(&self) -> Option<&Map<String, Value>> {
        self.0.get()
    }
}
