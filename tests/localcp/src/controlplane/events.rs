//! Events as one store with two views: core/v1 and events.k8s.io/v1.
//!
//! The operator records events through events.k8s.io/v1 (kube-runtime's `Recorder`), while
//! `kubectl describe` and `kubectl get events` read core/v1 with field selectors on `involvedObject`.
//! A real API server stores one Event and converts between the two shapes; so does this one: events
//! are stored in the core shape and converted field by field (the renames of the events.k8s.io/v1
//! conversion) on the way in and out of the events.k8s.io view.
//! Not reproduced: field selectors and watches through the events.k8s.io view see the core shape
//! (`involvedObject.name`, not `regarding.name`).

use serde_json::{Map, Value};

use super::registry::ResourceType;

/// (events.k8s.io/v1 name, core/v1 name) of every renamed field.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether `rt` is the events.k8s.io view, stored with the core events.
pub fn is_events_view(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io" && rt.plural == "events"
}

/// An events.k8s.io/v1 Event in the core/v1 shape.
pub fn to_core(obj: Value) -> Value {
    rename(obj, false)
}

/// A core/v1 Event in the events.k8s.io/v1 shape.
pub fn to_view(obj: Value) -> Value {
    rename(obj, true)
}

fn rename(obj: Value, core_to_view: bool) -> Value {
    let Value::Object(mut map) = obj else { return obj };
    let mut renamed = Map::new();
    for &(view, core) in RENAMES {
        let (from, to) = if core_to_view { (core, view) } else { (view, core) };
        if let Some(v) = map.remove(from) {
            renamed.insert(to.to_owned(), v);
        }
    }
    map.extend(renamed);
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_two_shapes_convert_both_ways() {
        let view = json!({"metadata": {"name": "e"}, "regarding": {"kind": "SqsSource", "name": "orders"},
            "note": "1 -> 3 replicas", "reason": "ScaledUp", "type": "Normal",
            "reportingController": "sluice-operator", "eventTime": "2026-01-01T00:00:00.000000Z"});
        let core = to_core(view.clone());
        assert_eq!(core["involvedObject"]["name"], "orders");
        assert_eq!(core["message"], "1 -> 3 replicas");
        assert_eq!(core["reportingComponent"], "sluice-operator");
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        assert_eq!(to_view(core), view);
    }
}
