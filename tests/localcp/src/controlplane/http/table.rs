//! `Table` responses (meta.k8s.io/v1), which `kubectl get` asks for and prints as columns.
//!
//! kubectl sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,…` and prints whatever columns
//! the server chose; a server that answers with a plain list gets NAME and AGE only. A custom resource's
//! columns are its CRD's `additionalPrinterColumns` (NAME first, `date` cells as timestamps that kubectl
//! turns into ages); built-in kinds get the columns a cluster prints for them (pods, deployments,
//! configmaps, events, namespaces) and any other kind the API server's default, Name and Created At.
//! Rows carry the object as `PartialObjectMetadata` unless `includeObject` says `Object` or `None`.
//! A watch asked for as a Table sends each event's object as a one-row Table (`kubectl get -w`).

use axum::http::{HeaderMap, header};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::jsonpath;
use crate::controlplane::registry::ResourceType;

/// Whether the client asked for a Table.
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| accept.split(',').any(|media| media.contains("as=Table")))
}

/// Where a column's cells come from.
enum Cell {
    Name,
    Age,
    Path(String),
    /// A `date` printer column: the API server sends the age (`5m10s`), not the timestamp.
    AgeAt(String),
    Computed(fn(&Value) -> Value),
}

struct Column {
    name: String,
    kind: String,
    description: String,
    priority: i64,
    cell: Cell,
}

fn column(name: &str, kind: &str, description: &str, cell: Cell) -> Column {
    Column { name: name.into(), kind: kind.into(), description: description.into(), priority: 0, cell }
}

/// The columns of `rt`; `crd` is its CustomResourceDefinition when it is a custom resource.
fn columns(rt: &ResourceType, crd: Option<&Value>) -> Vec<Column> {
    let name = || column("Name", "string", "Name must be unique within a namespace.", Cell::Name);
    let age = || column("Age", "string", "Time since the object was created.", Cell::Age);
    if let Some(crd) = crd {
        let printer = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(&rt.version))
            .and_then(|v| v.get("additionalPrinterColumns"))
            .and_then(Value::as_array);
        let Some(printer) = printer else {
            return vec![name(), age()];
        };
        let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let custom = printer.iter().map(|c| Column {
            name: text(c, "name"),
            kind: text(c, "type"),
            description: text(c, "description"),
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            cell: if text(c, "type") == "date" {
                Cell::AgeAt(text(c, "jsonPath"))
            } else {
                Cell::Path(text(c, "jsonPath"))
            },
        });
        return std::iter::once(name()).chain(custom).collect();
    }
    let computed = |n: &str, kind: &str, f: fn(&Value) -> Value| column(n, kind, "", Cell::Computed(f));
    let path = |n: &str, kind: &str, p: &str| column(n, kind, "", Cell::Path(p.to_owned()));
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => vec![
            name(),
            computed("Ready", "string", pod_ready),
            computed("Status", "string", |p| p.pointer("/status/phase").cloned().unwrap_or(Value::Null)),
            computed("Restarts", "string", pod_restarts),
            age(),
        ],
        ("apps", "deployments") => vec![
            name(),
            computed("Ready", "string", deployment_ready),
            computed("Up-to-date", "integer", |d| count(d, "/status/updatedReplicas")),
            computed("Available", "integer", |d| count(d, "/status/availableReplicas")),
            age(),
        ],
        ("", "configmaps") => vec![name(), computed("Data", "integer", configmap_data), age()],
        ("", "namespaces") => vec![name(), path("Status", "string", ".status.phase"), age()],
        ("", "events") => vec![
            computed("Last Seen", "string", event_last_seen),
            path("Type", "string", ".type"),
            path("Reason", "string", ".reason"),
            computed("Object", "string", event_object),
            path("Message", "string", ".message"),
        ],
        _ => vec![name(), path("Created At", "date", ".metadata.creationTimestamp")],
    }
}

/// A Table of `items`, as served for a list (or a single object: one row).
pub fn render(
    rt: &ResourceType,
    crd: Option<&Value>,
    items: &[Value],
    rv: u64,
    include: Option<&str>,
) -> Value {
    let columns = columns(rt, crd);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": if c.name == "Name" { "name" } else { "" },
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(&c.cell, obj)).collect();
            let mut row = json!({"cells": cells});
            match include {
                Some("None") => {}
                Some("Object") => row["object"] = obj.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                           "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))});
                }
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": definitions, "rows": rows})
}

fn cell(cell: &Cell, obj: &Value) -> Value {
    match cell {
        Cell::Name => obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        Cell::Age => age_of(obj.pointer("/metadata/creationTimestamp")),
        Cell::Computed(f) => f(obj),
        Cell::AgeAt(p) => match jsonpath::select(obj, p).first() {
            Some(found) => age_of(Some(found)),
            None => Value::Null,
        },
        Cell::Path(p) => {
            let found = jsonpath::select(obj, p);
            match found.as_slice() {
                [] => Value::Null,
                [one] => (*one).clone(),
                many => {
                    let texts: Vec<String> = many
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                        .collect();
                    json!(texts.join(","))
                }
            }
        }
    }
}

fn count(obj: &Value, pointer: &str) -> Value {
    json!(obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0))
}

fn pod_ready(pod: &Value) -> Value {
    let total = pod.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = match pod.pointer("/status/containerStatuses").and_then(Value::as_array) {
        Some(statuses) => statuses.iter().filter(|s| s.get("ready") == Some(&json!(true))).count(),
        None => {
            let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
            let ready =
                conditions.into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True");
            if ready { total } else { 0 }
        }
    };
    json!(format!("{ready}/{total}"))
}

fn pod_restarts(pod: &Value) -> Value {
    let statuses = pod.pointer("/status/containerStatuses").and_then(Value::as_array);
    let restarts: i64 =
        statuses.into_iter().flatten().filter_map(|s| s.get("restartCount").and_then(Value::as_i64)).sum();
    json!(restarts.to_string())
}

fn deployment_ready(d: &Value) -> Value {
    let ready = d.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0);
    let wanted = d.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    json!(format!("{ready}/{wanted}"))
}

fn configmap_data(cm: &Value) -> Value {
    let len = |k: &str| cm.get(k).and_then(Value::as_object).map_or(0, serde_json::Map::len);
    json!(len("data") + len("binaryData"))
}

fn event_last_seen(ev: &Value) -> Value {
    let seen = ["/lastTimestamp", "/eventTime", "/metadata/creationTimestamp"]
        .iter()
        .find_map(|p| ev.pointer(p).filter(|v| v.is_string()));
    age_of(seen)
}

fn event_object(ev: &Value) -> Value {
    let kind = ev.pointer("/involvedObject/kind").and_then(Value::as_str).unwrap_or_default();
    let name = ev.pointer("/involvedObject/name").and_then(Value::as_str).unwrap_or_default();
    json!(format!("{}/{name}", kind.to_lowercase()))
}

fn age_of(timestamp: Option<&Value>) -> Value {
    let parsed = timestamp.and_then(Value::as_str).and_then(|t| t.parse::<Timestamp>().ok());
    match parsed {
        Some(t) => json!(human_duration(Timestamp::now().as_second() - t.as_second())),
        None => json!("<unknown>"),
    }
}

/// A duration the way kubectl prints ages (apimachinery's `duration.HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match () {
        () if s < 120 => format!("{s}s"),
        () if m < 10 && s % 60 == 0 => format!("{m}m"),
        () if m < 10 => format!("{m}m{}s", s % 60),
        () if m < 180 => format!("{m}m"),
        () if h < 8 && m % 60 == 0 => format!("{h}h"),
        () if h < 8 => format!("{h}h{}m", m % 60),
        () if h < 48 => format!("{h}h"),
        () if h < 192 && h % 24 == 0 => format!("{d}d"),
        () if h < 192 => format!("{d}d{}h", h % 24),
        () if d < 365 * 2 => format!("{d}d"),
        () => format!("{}y", d / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::registry::Registry;

    #[test]
    fn ages_read_like_kubectl() {
        let cases =
            [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (86_400, "24h")];
        for (seconds, text) in cases {
            assert_eq!(human_duration(seconds), text);
        }
        assert_eq!(human_duration(3 * 86_400), "3d");
        assert_eq!(human_duration(800 * 86_400), "2y");
    }

    #[test]
    fn crd_printer_columns_fill_cells() {
        let rt = ResourceType { plural: "sqssources".into(), ..Registry::with_builtins().all()[0].clone() };
        let rt = ResourceType { group: "sluice.dev".into(), version: "v1alpha1".into(), ..rt };
        let crd = json!({"spec": {"versions": [{"name": "v1alpha1", "additionalPrinterColumns": [
            {"name": "Guarantee", "type": "string", "jsonPath": ".spec.delivery.guarantee"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}]}]}});
        let obj = json!({"metadata": {"name": "orders"}, "spec": {"delivery": {"guarantee": "atLeastOnce"}},
                         "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let table = render(&rt, Some(&crd), &[obj], 9, None);
        assert_eq!(table["rows"][0]["cells"], json!(["orders", "atLeastOnce", "True"]));
        assert_eq!(table["columnDefinitions"][1]["name"], "Guarantee");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn pods_show_ready_status_and_restarts() {
        let rt = Registry::with_builtins().find("", "v1", "pods").cloned().unwrap();
        let pod = json!({"metadata": {"name": "r-0", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "reader"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let table = render(&rt, None, &[pod], 1, Some("None"));
        let cells = table["rows"][0]["cells"].as_array().unwrap();
        assert_eq!(cells[0..4], [json!("r-0"), json!("1/1"), json!("Running"), json!("2")]);
        assert!(table["rows"][0].get("object").is_none());
    }
}
