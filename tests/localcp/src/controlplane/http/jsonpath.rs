//! The part of Kubernetes JSONPath that CRD printer columns use.
//!
//! `additionalPrinterColumns[].jsonPath` is a JSONPath without the surrounding braces; printer columns in
//! practice use field steps (`.status.queue.visible`), indexes (`[0]`) and one equality filter
//! (`[?(@.type=="Ready")]`). Those are what this evaluates; a path with anything else yields no value
//! (kubectl prints `<none>`), never an error.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    /// `[?(@.FIELD=="VALUE")]`.
    Filter {
        field: String,
        equals: String,
    },
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return None;
            }
            steps.push(Step::Field(after[..end].to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("[?(@.") {
            let close = after.find(")]")?;
            let (field, value) = after[..close].split_once("==")?;
            let equals = value.trim().trim_matches(|c| c == '"' || c == '\'').to_owned();
            steps.push(Step::Filter { field: field.trim().to_owned(), equals });
            rest = &after[close + 2..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']')?;
            steps.push(Step::Index(after[..close].trim().parse().ok()?));
            rest = &after[close + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// The values `path` selects in `obj` (empty when nothing matches or the path is not understood).
pub fn select<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse(path) else { return Vec::new() };
    let mut current = vec![obj];
    for step in &steps {
        current = current
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match step {
                    Step::Field(f) => v.get(f).into_iter().collect(),
                    Step::Index(i) => v.get(*i).into_iter().collect(),
                    Step::Filter { field, equals } => v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|item| item.get(field).is_some_and(|x| scalar_text(x) == *equals))
                        .collect(),
                }
            })
            .collect();
    }
    current
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_indexes_and_filters() {
        let obj = json!({"status": {"queue": {"visible": 7},
            "conditions": [{"type": "Scaling", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(select(&obj, ".status.queue.visible"), vec![&json!(7)]);
        assert_eq!(select(&obj, r#".status.conditions[?(@.type=="Ready")].status"#), vec![&json!("True")]);
        assert_eq!(select(&obj, ".status.conditions[0].type"), vec![&json!("Scaling")]);
        assert!(select(&obj, ".status.missing").is_empty());
        assert!(select(&obj, "status..x").is_empty());
    }
}
