//! The generated CRD: committed copy in sync, every property described, and only schema keywords
//! the local validator understands (so local validation stays exact).

use kube::CustomResourceExt;
use serde_json::Value;
use sluice_crds::{SqsSource, validate::source_schema, validate::structural::KNOWN_KEYWORDS};

#[test]
fn committed_crd_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds/sqssource.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = serde_yaml::to_string(&SqsSource::crd()).expect("CRD serializes");
    assert!(
        committed == generated,
        "{} is out of date with crds/src: run `cargo run -p sluice-crds --bin crdgen > deploy/crds/sqssource.yaml`",
        path.display()
    );
}

/// Walks every subschema, calling `visit(path, schema)`.
fn walk(schema: &Value, path: &str, visit: &mut dyn FnMut(&str, &Value)) {
    visit(path, schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            walk(child, &format!("{path}.{name}"), visit);
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, &format!("{path}[]"), visit);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(extra, &format!("{path}.*"), visit);
    }
}

#[test]
fn every_property_has_a_description() {
    let mut missing = Vec::new();
    walk(source_schema(), "", &mut |path, schema| {
        let described =
            schema.get("description").and_then(Value::as_str).is_some_and(|d| !d.trim().is_empty());
        // Items and map values are described by the property that holds them.
        let is_container_member = path.ends_with("[]") || path.ends_with(".*");
        if !described && !is_container_member {
            missing.push(if path.is_empty() { "(root)".to_owned() } else { path.to_owned() });
        }
    });
    assert!(missing.is_empty(), "properties without a description (add a doc comment): {missing:#?}");
}

#[test]
fn schema_uses_only_keywords_the_local_validator_understands() {
    let mut unknown = Vec::new();
    walk(source_schema(), "", &mut |path, schema| {
        for key in schema.as_object().into_iter().flat_map(|o| o.keys()) {
            if !KNOWN_KEYWORDS.contains(&key.as_str()) {
                unknown.push(format!("{path}: {key}"));
            }
        }
    });
    assert!(unknown.is_empty(), "teach validate/structural.rs these keywords: {unknown:#?}");
}

#[test]
fn conditions_are_a_list_map_keyed_by_type() {
    let conditions = &source_schema()["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], serde_json::json!(["type"]));
}

#[test]
fn crd_has_status_subresource_short_name_and_printer_columns() {
    let crd = SqsSource::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["sqss".to_owned()]));
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let columns: Vec<(&str, &str)> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Depth", ".status.queue.visible"),
            ("Readers", ".status.readyReplicas"),
            ("Guarantee", ".spec.delivery.guarantee"),
            ("Held", ".status.held.messages"),
            ("Committed", ".status.committedEpoch"),
            ("Ready", r#".status.conditions[?(@.type=="Ready")].status"#),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}
