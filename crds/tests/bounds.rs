//! Every numeric, length and size bound in the generated schema, tested just outside the limit
//! (rejected, with a message naming the field and the limit) and at the limit (no bound
//! violation). The bounds are found by walking the schema, so a new bound is tested automatically.

mod support;

use serde_json::{Value, json};
use sluice_crds::validate::{source_schema, validate_source_value};
use support::{full, full_with_secret, get_path, rejected, set_path};

#[derive(Debug)]
struct Bound {
    /// `spec.sinks[].http.timeoutMs`; a trailing `[]` means the bound is on list items.
    path: String,
    keyword: &'static str,
    limit: i64,
    item_type: Option<String>,
}

fn collect(schema: &Value, path: &str, out: &mut Vec<Bound>) {
    for keyword in ["minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "maxProperties"] {
        if let Some(limit) = schema.get(keyword).and_then(Value::as_f64) {
            let item_type = schema.pointer("/items/type").and_then(Value::as_str).map(str::to_owned);
            out.push(Bound { path: path.to_owned(), keyword, limit: limit as i64, item_type });
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            collect(child, &child_path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        collect(items, &format!("{path}[]"), out);
    }
}

/// The value just outside the bound and the value at it.
fn values(bound: &Bound, base: &Value) -> (Value, Value) {
    let n = bound.limit;
    match bound.keyword {
        "minimum" => (json!(n - 1), json!(n)),
        "maximum" => (json!(n + 1), json!(n)),
        "minLength" => ("a".repeat((n - 1) as usize).into(), "a".repeat(n as usize).into()),
        "maxLength" => ("a".repeat((n + 1) as usize).into(), "a".repeat(n as usize).into()),
        "maxProperties" => {
            let map = |len: i64| {
                Value::Object((0..len).map(|i| (format!("example.com/k{i}"), json!("x"))).collect())
            };
            (map(n + 1), map(n))
        }
        _ => {
            let item = match bound.item_type.as_deref() {
                Some("object") => {
                    // The dead-letter sink shares the sink schema: copy an item from spec.sinks.
                    let shared = bound.path.replacen("spec.deadLetterSink.", "spec.sinks[].", 1);
                    get_path(base, &format!("{}[]", bound.path))
                        .or_else(|| get_path(base, &format!("{shared}[]")))
                        .cloned()
                        .expect("an item to copy")
                }
                Some("integer") => json!(503),
                _ => json!("All"),
            };
            let list = |len: i64| Value::Array(vec![item.clone(); len.max(0) as usize]);
            if bound.keyword == "minItems" { (list(n - 1), list(n)) } else { (list(n + 1), list(n)) }
        }
    }
}

fn expected_phrase(bound: &Bound) -> String {
    let n = bound.limit;
    match bound.keyword {
        "minimum" => format!("must be >= {n}"),
        "maximum" => format!("must be <= {n}"),
        "minLength" => format!("must have at least {n} characters"),
        "maxLength" => format!("must have at most {n} characters"),
        "minItems" => format!("must have at least {n} entries"),
        "maxProperties" => format!("must have at most {n} keys"),
        _ => format!("must have at most {n} entries"),
    }
}

/// Puts `value` at the bound's path; a bound on list items becomes a one-item list.
fn place(doc: &mut Value, path: &str, value: Value) -> String {
    let try_place = |doc: &mut Value| match path.strip_suffix("[]") {
        Some(list) => set_path(doc, list, json!([value.clone()])).map(|p| format!("{p}[0]")),
        None => set_path(doc, path, value.clone()),
    };
    if let Some(placed) = try_place(doc) {
        return placed;
    }
    // The dead-letter sink shares the sink schema: give it the kind block the path needs.
    if let Some(kind) = path.strip_prefix("spec.deadLetterSink.").and_then(|rest| rest.split('.').next()) {
        let donor = get_path(doc, "spec.sinks")
            .and_then(Value::as_array)
            .and_then(|sinks| sinks.iter().find(|s| s.get(kind.trim_end_matches("[]")).is_some()).cloned());
        if let Some(mut sink) = donor {
            sink["name"] = json!("dead");
            doc["spec"]["deadLetterSink"] = sink;
            if let Some(placed) = try_place(doc) {
                return placed;
            }
        }
    }
    panic!("the fixture has no place for {path}: extend support::full()")
}

#[test]
fn every_schema_bound_rejects_outside_and_accepts_at_the_limit() {
    let mut bounds = Vec::new();
    collect(source_schema(), "", &mut bounds);
    assert!(bounds.len() >= 60, "expected the spec's bounds, found only {}", bounds.len());
    for bound in &bounds {
        let base = if bound.path.contains("secretRef") { full_with_secret() } else { full() };
        let (outside, at) = values(bound, &base);

        let mut bad = base.clone();
        let concrete = place(&mut bad, &bound.path, outside.clone());
        let err = rejected(&bad);
        let phrase = expected_phrase(bound);
        let line = err.violations().iter().find(|v| v.path == concrete && v.message.contains(&phrase));
        assert!(line.is_some(), "{concrete} = {outside}: expected \"{concrete}: {phrase} ...\", got:\n{err}");

        let mut good = base.clone();
        place(&mut good, &bound.path, at.clone());
        if let Err(e) = validate_source_value(&good) {
            // At its length limit `spec.filter.expression` is 4096 a's: long enough, but no
            // expression, which `validate::filter` says (not the schema).
            let structural = e
                .violations()
                .iter()
                .find(|v| v.path == concrete && v.rule.is_none() && !v.message.starts_with("uses \"a"));
            assert!(structural.is_none(), "{concrete} = {at} is at the limit yet rejected: {e}");
        }
    }
}

#[test]
fn the_bounds_the_issue_names_are_in_the_schema() {
    let mut bounds = Vec::new();
    collect(source_schema(), "", &mut bounds);
    let has = |path: &str, keyword: &str, limit: i64| {
        bounds.iter().any(|b| b.path == path && b.keyword == keyword && b.limit == limit)
    };
    let wanted = [
        ("spec.receive.maxMessages", "minimum", 1),
        ("spec.receive.maxMessages", "maximum", 10),
        ("spec.receive.waitTimeSeconds", "minimum", 0),
        ("spec.receive.waitTimeSeconds", "maximum", 20),
        ("spec.receive.visibilityTimeoutSeconds", "minimum", 0),
        ("spec.receive.visibilityTimeoutSeconds", "maximum", 43200),
        ("spec.receive.pollers", "minimum", 1),
        ("spec.receive.pollers", "maximum", 64),
        ("spec.scaling.minReplicas", "minimum", 0),
        ("spec.scaling.maxReplicas", "minimum", 1),
        ("spec.scaling.pollIntervalSeconds", "minimum", 1),
        ("spec.scaling.pollIntervalSeconds", "maximum", 300),
        ("spec.queues", "minItems", 1),
        ("spec.sinks", "minItems", 1),
        ("spec.queues[].weight", "minimum", 1),
        ("spec.delivery.checkpointIntervalSeconds", "minimum", 1),
        ("spec.delivery.checkpointIntervalSeconds", "maximum", 3600),
        ("spec.delivery.retry.maxAttempts", "minimum", 1),
        ("spec.delivery.retry.maxAttempts", "maximum", 100),
        ("spec.delivery.unreadyAfterSeconds", "minimum", 1),
        ("spec.delivery.unreadyAfterSeconds", "maximum", 3600),
    ];
    for (path, keyword, limit) in wanted {
        assert!(has(path, keyword, limit), "missing {keyword} {limit} on {path}");
    }
}

#[test]
fn the_fixture_itself_is_valid() {
    support::accepted(&full());
    support::accepted(&full_with_secret());
}
