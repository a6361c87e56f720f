//! Structural validation of a JSON value against the CRD's OpenAPI v3 schema.
//!
//! This is the apiserver's first admission step done locally: prune nulls the schema does not
//! allow, then check types, enums, bounds, required fields and unknown fields, reporting each
//! problem at its path (`spec.queues[0].weight`). It is a walker of our own rather than a JSON
//! Schema library because OpenAPI's `nullable` and the `x-kubernetes-*` keywords are not JSON
//! Schema, and because every message should say what to change. It understands exactly the
//! keywords in [`KNOWN_KEYWORDS`]; a test fails if the generated schema ever uses another one.

use serde_json::{Map, Value};

use super::error::Violation;

/// Every schema keyword this walker understands (validating or purely descriptive).
pub const KNOWN_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "nullable",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "format",
    "default",
    "description",
    "title",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-int-or-string",
];

/// Removes `null` values where the schema does not say `nullable: true`, as the apiserver does
/// before defaulting: such a field then counts as absent (its default applies, or it is missing).
pub fn prune_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                obj.retain(|key, child| {
                    let nullable = props.get(key).is_some_and(is_nullable);
                    !(child.is_null() && props.contains_key(key) && !nullable)
                });
                for (key, child) in obj.iter_mut() {
                    if let Some(child_schema) = props.get(key) {
                        prune_nulls(child_schema, child);
                    }
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                let known = schema.get("properties").and_then(Value::as_object);
                for (key, child) in obj.iter_mut() {
                    if known.is_none_or(|k| !k.contains_key(key)) {
                        prune_nulls(extra, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|item| prune_nulls(item_schema, item));
            }
        }
        _ => {}
    }
}

/// Checks `value` against `schema` at `path`, appending one [`Violation`] per problem.
pub fn check(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    if value.is_null() {
        if !is_nullable(schema) {
            out.push(Violation::new(path, "must not be null: give it a value or remove the field"));
        }
        return;
    }
    // Kubernetes quantities and ports: a whole number or a string, and no `type` keyword.
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
        && !(value.is_string() || has_type(value, "integer"))
    {
        out.push(Violation::new(
            path,
            format!("must be a whole number or a string (got {})", describe(value)),
        ));
        return;
    }
    if let Some(ty) = schema.get("type").and_then(Value::as_str)
        && !has_type(value, ty)
    {
        out.push(Violation::new(path, format!("must be {} (got {})", article(ty), describe(value))));
        return;
    }
    check_enum(schema, value, path, out);
    match value {
        Value::Number(_) => check_number(schema, value, path, out),
        Value::String(s) => check_length(schema, s.chars().count(), "characters", path, out),
        Value::Array(items) => check_array(schema, items, path, out),
        Value::Object(obj) => check_object(schema, obj, path, out),
        _ => {}
    }
}

fn is_nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => true,
    }
}

fn article(ty: &str) -> &'static str {
    match ty {
        "object" => "a mapping (object)",
        "array" => "a list",
        "string" => "a string",
        "boolean" => "true or false",
        "integer" => "a whole number",
        "number" => "a number",
        _ => "of another type",
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(a) => format!("a list of {} entries", a.len()),
        Value::Object(_) => "a mapping".into(),
    }
}

fn check_enum(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else { return };
    if !allowed.contains(value) {
        let names: Vec<String> =
            allowed.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect();
        out.push(Violation::new(
            path,
            format!("must be one of {} (got {})", names.join(", "), describe(value)),
        ));
    }
}

fn check_number(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    let Some(n) = value.as_f64() else { return };
    let found = out.len();
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && n < min
    {
        out.push(Violation::new(path, format!("must be >= {} (got {value})", plain(min))));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && n > max
    {
        out.push(Violation::new(path, format!("must be <= {} (got {value})", plain(max))));
    }
    // One bound per value: the schema's own bound is the one a user can act on; the type's range
    // is named only when no schema bound was broken.
    if out.len() > found {
        return;
    }
    if let Some((lo, hi)) = schema.get("format").and_then(Value::as_str).and_then(format_range) {
        let fits = match value.as_i64() {
            Some(i) => i128::from(i) >= lo && i128::from(i) <= hi,
            None => value.as_u64().is_some_and(|u| i128::from(u) <= hi),
        };
        if value.is_f64() || fits {
            return;
        }
        out.push(Violation::new(path, format!("must be between {lo} and {hi} (got {value})")));
    }
}

/// The range of an integer `format`, so out-of-range numbers are reported at their path instead
/// of failing later in typed deserialization.
fn format_range(format: &str) -> Option<(i128, i128)> {
    match format {
        "int32" => Some((i32::MIN.into(), i32::MAX.into())),
        "int64" => Some((i64::MIN.into(), i64::MAX.into())),
        "uint8" => Some((0, u8::MAX.into())),
        "uint16" => Some((0, u16::MAX.into())),
        "uint32" => Some((0, u32::MAX.into())),
        "uint64" => Some((0, u64::MAX.into())),
        _ => None,
    }
}

/// Prints a schema bound without a spurious `.0`.
fn plain(bound: f64) -> String {
    if bound.fract() == 0.0 && bound.abs() < 1e15 { format!("{}", bound as i64) } else { bound.to_string() }
}

fn check_length(schema: &Value, len: usize, unit: &str, path: &str, out: &mut Vec<Violation>) {
    let (min_key, max_key) = match unit {
        "entries" => ("minItems", "maxItems"),
        "keys" => ("minProperties", "maxProperties"),
        _ => ("minLength", "maxLength"),
    };
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && (len as u64) < min
    {
        out.push(Violation::new(path, format!("must have at least {min} {unit} (got {len})")));
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && (len as u64) > max
    {
        out.push(Violation::new(path, format!("must have at most {max} {unit} (got {len})")));
    }
}

fn check_array(schema: &Value, items: &[Value], path: &str, out: &mut Vec<Violation>) {
    check_length(schema, items.len(), "entries", path, out);
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{path}[{i}]"), out);
        }
    }
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        check_list_map_keys(schema, items, path, out);
    }
}

/// A list-map (`x-kubernetes-list-type: map`) may hold each key combination once.
fn check_list_map_keys(schema: &Value, items: &[Value], path: &str, out: &mut Vec<Violation>) {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seen: Vec<Vec<&Value>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key: Vec<&Value> = keys.iter().map(|k| item.get(*k).unwrap_or(&Value::Null)).collect();
        if seen.contains(&key) {
            let shown: Vec<String> = keys.iter().zip(&key).map(|(k, v)| format!("{k}={v}")).collect();
            out.push(Violation::new(
                format!("{path}[{i}]"),
                format!("duplicate entry with {}: keep one entry per key", shown.join(", ")),
            ));
        } else {
            seen.push(key);
        }
    }
}

fn check_object(schema: &Value, obj: &Map<String, Value>, path: &str, out: &mut Vec<Violation>) {
    check_length(schema, obj.len(), "keys", path, out);
    let props = schema.get("properties").and_then(Value::as_object);
    for name in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(name) = name.as_str()
            && !obj.contains_key(name)
        {
            out.push(Violation::new(join(path, name), "is required: add it"));
        }
    }
    let extra = schema.get("additionalProperties").filter(|s| s.is_object());
    for (key, child) in obj {
        let child_path = join(path, key);
        match (props.and_then(|p| p.get(key)), extra) {
            (Some(child_schema), _) | (None, Some(child_schema)) => {
                check(child_schema, child, &child_path, out)
            }
            (None, None) => {
                let known: Vec<&str> =
                    props.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
                out.push(Violation::new(child_path, unknown_field_message(key, &known)));
            }
        }
    }
}

fn unknown_field_message(key: &str, known: &[&str]) -> String {
    let hint = known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(key) || k.trim_end_matches('s') == key.trim_end_matches('s'))
        .map(|k| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    format!("unknown field{hint}: remove it; the fields allowed here are {}", known.join(", "))
}

/// Joins an object path and a key the way Kubernetes prints field paths.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}
