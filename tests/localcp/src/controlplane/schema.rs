//! Structural-schema defaulting and pruning of custom resources, as the API server does them.
//!
//! A cluster fills a CRD's `default:` values and drops fields its schema does not declare on every
//! create, update and apply, before validation and storage. Clients see the result: `kubectl get`
//! shows GUARANTEE `atLeastOnce` for a source that never named it, and a misspelt field vanishes
//! instead of being stored. The operator must be tested against objects shaped that way.
//!
//! Rules followed (from the structural-schema rules of apiextensions-apiserver): a default applies only
//! where its parent object exists, and the defaulted value is itself defaulted; an object's unknown keys
//! are pruned unless the node says `x-kubernetes-preserve-unknown-fields: true` or declares
//! `additionalProperties`; `apiVersion`, `kind` and `metadata` at the root are never pruned.
//! Not reproduced: the `nullable` handling of defaults, and pruning inside `x-kubernetes-embedded-resource`.

use serde_json::{Map, Value};

/// The `openAPIV3Schema` of `version` in a CustomResourceDefinition object.
pub fn of_version<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
}

/// Defaults and prunes a whole custom resource in place.
pub fn default_and_prune(schema: &Value, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else { return };
    let root: Vec<(String, Value)> =
        ["apiVersion", "kind", "metadata"].iter().filter_map(|k| map.remove_entry(*k)).collect();
    walk(schema, obj);
    if let Some(map) = obj.as_object_mut() {
        map.extend(root);
    }
}

fn walk(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => walk_object(schema, map),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|item| walk(item_schema, item));
            }
        }
        _ => {}
    }
}

fn walk_object(schema: &Value, map: &mut Map<String, Value>) {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(properties) = properties {
        for (key, prop) in properties {
            if !map.contains_key(key)
                && let Some(default) = prop.get("default")
            {
                map.insert(key.clone(), default.clone());
            }
        }
    }
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    if !preserve
        && additional.is_none()
        && (properties.is_some() || schema.get("type") == Some(&"object".into()))
    {
        map.retain(|key, _| properties.is_some_and(|p| p.contains_key(key)));
    }
    for (key, child) in map.iter_mut() {
        if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
            walk(child_schema, child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "delivery": {"type": "object", "default": {}, "properties": {
                    "guarantee": {"type": "string", "default": "atLeastOnce"},
                    "retry": {"type": "object", "properties": {"maxAttempts": {"type": "integer", "default": 5}}}}},
                "sinks": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "log": {"type": "object", "properties": {}}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}})
    }

    #[test]
    fn missing_parents_are_defaulted_then_their_fields() {
        let mut obj = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource",
            "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {}});
        default_and_prune(&schema(), &mut obj);
        assert_eq!(obj["spec"]["delivery"], json!({"guarantee": "atLeastOnce"}));
        assert_eq!(obj["metadata"]["labels"]["x"], "y");
        assert_eq!(obj["kind"], "SqsSource");
    }

    #[test]
    fn unknown_fields_are_pruned_except_where_preserved() {
        let mut obj = json!({"metadata": {"name": "a"}, "spec": {
            "delivery": {"guarantee": "exactlyOnce", "guarantees": "typo", "retry": {}},
            "sinks": [{"name": "s", "log": {"level": "x"}, "extra": 1}],
            "labels": {"a": "b"}, "free": {"anything": {"goes": 1}}, "unknown": true},
            "status": {"replicas": 1, "bogus": 2}, "toplevel": 1});
        default_and_prune(&schema(), &mut obj);
        assert_eq!(
            obj,
            json!({"metadata": {"name": "a"}, "spec": {
            "delivery": {"guarantee": "exactlyOnce", "retry": {"maxAttempts": 5}},
            "sinks": [{"name": "s", "log": {}}],
            "labels": {"a": "b"}, "free": {"anything": {"goes": 1}}},
            "status": {"replicas": 1}})
        );
    }
}
