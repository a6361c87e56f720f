//! CEL cost bounds: a real API server estimates each rule's cost from the largest value the schema
//! allows and refuses a CRD whose estimate is over budget (10,000,000 per rule, its runs included;
//! 100,000,000 for all rules together). An unbounded string counts as long as a whole request
//! and an unbounded list as long as it fits, so every string, list and map in `spec` must carry
//! `maxLength`, `maxItems` or `maxProperties`. The test walks the generated schema, fails on any
//! that does not (naming whether a CEL rule reaches it), and prints each rule's worst-case run
//! count and an over-estimate of its cost (see deploy/README.md, "CEL cost budget").

use serde_json::Value;
use sluice_crds::validate::source_schema;

/// The API server's static limit on one rule's estimated cost, its runs included.
const PER_RULE_LIMIT: f64 = 10_000_000.0;
/// The API server's static limit on the sum over every rule of a CRD.
const PER_CRD_LIMIT: f64 = 100_000_000.0;
/// Map keys have no schema bound; Kubernetes label and annotation keys are at most 317.
const MAP_KEY_LENGTH: f64 = 317.0;

fn bound(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn is_type(schema: &Value, ty: &str) -> bool {
    schema.get("type").and_then(Value::as_str) == Some(ty)
}

fn map_values(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|v| v.is_object())
}

/// Unbounded strings, lists and maps under `schema`: (path, reached by a CEL rule).
fn unbounded(schema: &Value, path: &str, ruled: bool, out: &mut Vec<(String, bool)>) {
    let ruled = ruled || schema.get("x-kubernetes-validations").is_some();
    let bounded_string = schema.get("enum").is_some() || bound(schema, "maxLength").is_some();
    if (is_type(schema, "string") && !bounded_string)
        || (is_type(schema, "array") && bound(schema, "maxItems").is_none())
        || (map_values(schema).is_some() && bound(schema, "maxProperties").is_none())
    {
        out.push((path.to_owned(), ruled));
    }
    for (name, child) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        unbounded(child, &format!("{path}.{name}"), ruled, out);
    }
    if let Some(items) = schema.get("items") {
        unbounded(items, &format!("{path}[]"), ruled, out);
    }
    if let Some(values) = map_values(schema) {
        unbounded(values, &format!("{path}.*"), ruled, out);
    }
}

/// Worst-case traversal cost of the value a rule sees (CEL's string traversal factor is 0.1 a
/// character; every element visited costs 1). Of an object only the properties the rule names
/// count, when it names any (a rule on `spec` that reads `self.sinks` never walks `reader`).
fn data_cost(schema: &Value, rule: Option<&str>) -> f64 {
    if is_type(schema, "string") {
        let longest_enum = schema.get("enum").and_then(Value::as_array).map(|values| {
            values.iter().filter_map(Value::as_str).map(|v| v.len() as f64).fold(0.0, f64::max)
        });
        let length = bound(schema, "maxLength").or(longest_enum).unwrap_or(f64::INFINITY);
        return (length * 0.1).ceil() + 1.0;
    }
    if let Some(items) = schema.get("items") {
        return bound(schema, "maxItems").unwrap_or(f64::INFINITY) * (1.0 + data_cost(items, None));
    }
    if let Some(values) = map_values(schema) {
        let entry = 1.0 + (MAP_KEY_LENGTH * 0.1).ceil() + data_cost(values, None);
        return bound(schema, "maxProperties").unwrap_or(f64::INFINITY) * entry;
    }
    let props: Vec<(&String, &Value)> =
        schema.get("properties").and_then(Value::as_object).into_iter().flatten().collect();
    let named: Vec<_> =
        props.iter().filter(|(n, _)| rule.is_some_and(|r| r.contains(&format!(".{n}")))).collect();
    let counted = if named.is_empty() { props.iter().collect() } else { named };
    1.0 + counted.iter().map(|(_, child)| 1.0 + data_cost(child, None)).sum::<f64>()
}

/// The largest list or map bound right under a rule's node: the inner loop of a nested
/// comprehension (`self.all(a, self.exists_one(b, ...))`).
fn inner_loop(schema: &Value) -> f64 {
    let own = bound(schema, "maxItems").or_else(|| bound(schema, "maxProperties"));
    let children = schema.get("properties").and_then(Value::as_object).into_iter().flatten();
    let child = children
        .filter_map(|(_, c)| bound(c, "maxItems").or_else(|| bound(c, "maxProperties")))
        .fold(1.0, f64::max);
    own.unwrap_or(1.0).max(child)
}

struct RuleCost {
    path: String,
    runs: f64,
    cost: f64,
}

/// One rule's over-estimate: runs × (traversal × regex factor × nested loop).
fn rule_cost(schema: &Value, rule: &str, runs: f64) -> f64 {
    let regex = rule
        .split("matches('")
        .skip(1)
        .filter_map(|r| r.split("')").next())
        .map(|r| (r.len() as f64 * 0.25).ceil())
        .fold(1.0, f64::max);
    let loops = ["all(", "exists(", "exists_one("].iter().map(|m| rule.matches(m).count()).sum::<usize>();
    let nested = if loops >= 2 { inner_loop(schema) } else { 1.0 };
    runs * data_cost(schema, Some(rule)) * regex * nested
}

fn rule_costs(schema: &Value, path: &str, runs: f64, out: &mut Vec<RuleCost>) {
    for rule in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
        let text = rule["rule"].as_str().unwrap_or_default();
        out.push(RuleCost { path: path.to_owned(), runs, cost: rule_cost(schema, text, runs) });
    }
    for (name, child) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        rule_costs(child, &format!("{path}.{name}"), runs, out);
    }
    if let Some(items) = schema.get("items") {
        let each = bound(schema, "maxItems").unwrap_or(f64::INFINITY);
        rule_costs(items, &format!("{path}[]"), runs * each, out);
    }
    if let Some(values) = map_values(schema) {
        let each = bound(schema, "maxProperties").unwrap_or(f64::INFINITY);
        rule_costs(values, &format!("{path}.*"), runs * each, out);
    }
}

fn spec_schema() -> &'static Value {
    &source_schema()["properties"]["spec"]
}

#[test]
fn every_string_list_and_map_in_the_spec_is_bounded() {
    let mut found = Vec::new();
    unbounded(spec_schema(), "spec", false, &mut found);
    let listed: Vec<String> = found
        .iter()
        .map(|(path, ruled)| format!("{path}{}", if *ruled { " (reached by a CEL rule)" } else { "" }))
        .collect();
    assert!(
        listed.is_empty(),
        "give these maxLength / maxItems / maxProperties (a #[schemars(length(max = N))] or extend \
         attribute, documented in the field's doc comment):\n{}",
        listed.join("\n")
    );
}

#[test]
fn every_rule_fits_the_api_servers_cost_budget() {
    let mut costs = Vec::new();
    rule_costs(spec_schema(), "spec", 1.0, &mut costs);
    assert!(costs.len() >= 70, "expected the CRD's CEL rules, found {}", costs.len());
    costs.sort_by(|a, b| b.cost.total_cmp(&a.cost));
    let total: f64 = costs.iter().map(|c| c.cost).sum();
    let most = costs.iter().map(|c| c.runs).fold(0.0, f64::max);
    let most_at: Vec<&str> = costs.iter().filter(|c| c.runs == most).map(|c| c.path.as_str()).collect();
    println!("{} rules, estimated total {total:.0} (limit {PER_CRD_LIMIT:.0})", costs.len());
    println!("most runs of one rule: {most} ({most_at:?}); the ten costliest:");
    for c in costs.iter().take(10) {
        println!("  {:>10.0}  runs {:>5}  {}", c.cost, c.runs, c.path);
    }
    for c in &costs {
        assert!(
            c.cost <= PER_RULE_LIMIT,
            "the rule on {} is estimated at {:.0} > {PER_RULE_LIMIT:.0}",
            c.path,
            c.cost
        );
    }
    assert!(total <= PER_CRD_LIMIT, "the rules together are estimated at {total:.0} > {PER_CRD_LIMIT:.0}");
}

#[test]
fn the_walk_finds_an_unbounded_map_under_a_rule() {
    let schema = serde_json::json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "true", "message": "m: x"}],
        "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}}}
    });
    let mut found = Vec::new();
    unbounded(&schema, "spec", false, &mut found);
    assert_eq!(found, vec![("spec.labels".to_owned(), true)]);
    let mut costs = Vec::new();
    rule_costs(&schema, "spec", 1.0, &mut costs);
    assert!(costs[0].cost.is_infinite(), "an unbounded map makes the estimate unbounded");
}
