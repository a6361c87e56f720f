//! Size bounds for the Kubernetes types embedded in `spec.reader` (tolerations, affinity,
//! topology spread constraints, pull secrets, extra environment).
//!
//! Why: a real API server estimates the cost of every CEL rule from the largest value the schema
//! allows, and a rule on `spec` (an ancestor of everything) reaches every string, list and map in
//! it. Kubernetes' own schemas for these types leave most of them unbounded, so the estimate
//! would take each string as long as a whole request and each list as long as it can fit, and the
//! CRD would be refused (see deploy/README.md, "CEL cost budget"). The types are embedded
//! unchanged, so a Deployment manifest pastes in; only the limits are added, by field name:
//!
//! | field | bound |
//! | --- | --- |
//! | `key`, `topologyKey`, `matchLabelKeys[]`, `mismatchLabelKeys[]` (label keys) | 317 characters (253 prefix, `/`, 63 name) |
//! | `values[]`, `value` of a toleration, `matchLabels` values, `namespaces[]` | 253 characters (a label value, node or namespace name) |
//! | `name`, `containerName`, `prefix` | 253 characters |
//! | `operator`, `effect`, `whenUnsatisfiable`, `nodeAffinityPolicy`, `nodeTaintsPolicy`, `resource`, `apiVersion` | 64 characters |
//! | `fieldPath` | 256 characters |
//! | `value` of an environment variable | 32768 characters (32 KiB) |
//! | term lists (`nodeSelectorTerms`, `required…`/`preferred…DuringScheduling…`) | 16 entries (the operator also refuses more than 16 in all) |
//! | `matchExpressions` | 16 entries; `matchFields` 8 |
//! | `values`, `namespaces` | 64 entries; `matchLabelKeys`, `mismatchLabelKeys` 16 |
//! | `matchLabels` | 32 entries |
//!
//! Any other string, list or map gets 253 characters, 16 entries or 32 entries; bounds the
//! Kubernetes schema already has are kept.

use schemars::Schema;
use serde_json::{Map, Value, json};

/// The bound a string field gets, by its property name (`*` for list items and map values,
/// which take the bound of the property holding them).
fn string_bound(name: &str, in_env_var: bool) -> u64 {
    match name {
        "key" | "topologyKey" | "matchLabelKeys" | "mismatchLabelKeys" => 317,
        "value" if in_env_var => 32_768,
        "operator" | "effect" | "whenUnsatisfiable" | "nodeAffinityPolicy" | "nodeTaintsPolicy"
        | "resource" | "apiVersion" => 64,
        "fieldPath" => 256,
        _ => 253,
    }
}

fn list_bound(name: &str) -> u64 {
    match name {
        "matchFields" => 8,
        "values" | "namespaces" => 64,
        _ => 16,
    }
}

const MAP_BOUND: u64 = 32;

/// A schemars transform: bounds every string, list and map of an embedded Kubernetes type.
/// `in_env_var` makes `value` an environment variable's value rather than a label value.
fn bound(schema: &mut Map<String, Value>, name: &str, in_env_var: bool) {
    for key in ["anyOf", "oneOf", "allOf"] {
        for sub in schema.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(sub) = sub.as_object_mut() {
                bound(sub, name, in_env_var);
            }
        }
    }
    let ty = schema.get("type").cloned();
    let is =
        |t: &str| ty.as_ref().is_some_and(|v| v == t || v.as_array().is_some_and(|a| a.contains(&json!(t))));
    if is("string") && !schema.contains_key("enum") && !schema.contains_key("format") {
        schema.entry("maxLength").or_insert(json!(string_bound(name, in_env_var)));
    }
    if is("array") {
        schema.entry("maxItems").or_insert(json!(list_bound(name)));
        if let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) {
            bound(items, name, in_env_var);
        }
    }
    if let Some(values) = schema.get_mut("additionalProperties").and_then(Value::as_object_mut) {
        bound(values, name, in_env_var);
        schema.entry("maxProperties").or_insert(json!(MAP_BOUND));
    }
    let env_var = in_env_var || schema.get("properties").is_some_and(|p| p.get("valueFrom").is_some());
    for (child, sub) in schema.get_mut("properties").and_then(Value::as_object_mut).into_iter().flatten() {
        if let Some(sub) = sub.as_object_mut() {
            bound(sub, child, env_var && child == "value");
        }
    }
}

/// Field transform for `spec.reader`'s embedded Kubernetes types (see the module docs).
pub fn bound_embedded(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        bound(obj, "", false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_lists_and_maps_get_bounds_by_name() {
        let mut schema = Schema::try_from(json!({
            "type": "array",
            "items": {"type": "object", "properties": {
                "name": {"type": "string"},
                "value": {"type": "string"},
                "valueFrom": {"type": "object", "properties": {"fieldRef": {"type": "object", "properties": {
                    "fieldPath": {"type": "string"}}}}},
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                "values": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
            }}
        }))
        .unwrap();
        bound_embedded(&mut schema);
        let v = schema.as_value();
        assert_eq!(v["maxItems"], 16);
        let item = &v["items"]["properties"];
        assert_eq!(item["name"]["maxLength"], 253);
        assert_eq!(item["value"]["maxLength"], 32_768, "an environment variable's value");
        assert_eq!(item["valueFrom"]["properties"]["fieldRef"]["properties"]["fieldPath"]["maxLength"], 256);
        assert_eq!(item["matchLabels"]["maxProperties"], 32);
        assert_eq!(item["matchLabels"]["additionalProperties"]["maxLength"], 253);
        assert_eq!(item["values"]["maxItems"], 3, "an existing bound is kept");
        assert_eq!(item["values"]["items"]["maxLength"], 253);
    }
}
