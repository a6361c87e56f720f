//! `spec.filter`, evaluated: does a received message match the source's CEL expression.
//!
//! Pure: a record in, [`Judgement`] out; what becomes of a mismatch (delete, release, route) is
//! carried out by `intake::filtering` through the pipeline's usual paths. The program is compiled
//! once at start (`sluice_crds::validate::filter::compile`, which also refuses unknown names) and
//! reused for every message; only the variables the expression names are built for a message, a
//! raw body is parsed as JSON only when the expression reads `body`, and when it reads only named
//! fields of it (`body.region`, `has(body.order)`) only those top-level fields become CEL values,
//! not the whole document (most of the cost of a filter on the body; BENCHMARKS.md).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cel::common::ast::{Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, ExecutionError, Program, Value};
use sluice_crds::FilterSpec;
use sluice_crds::validate::filter::children;

use crate::record::{Payload, Record};

/// What the expression said about one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    Match,
    Mismatch,
    /// The expression failed on this message (or gave something other than a bool):
    /// `spec.filter.onError` decides (`intake::filtering`), counted and logged apart. The text is
    /// one line, without the message's content.
    Error(String),
}

/// The compiled `spec.filter.expression` and which variables it reads.
pub struct Filter {
    program: Program,
    attributes: bool,
    system: bool,
    message_id: bool,
    body: bool,
    /// The top-level fields of a JSON body the expression selects, when it uses `body` in no
    /// other way; `None`: the whole body.
    body_fields: Option<BTreeSet<String>>,
}

impl Filter {
    /// Compile `spec.expression`; the error names what to change (the caller names the field).
    pub fn compile(spec: &FilterSpec) -> Result<Self, String> {
        let program = sluice_crds::validate::filter::compile(&spec.expression)?;
        let refs = program.references();
        let (attributes, system) = (refs.has_variable("attributes"), refs.has_variable("system"));
        let (message_id, body) = (refs.has_variable("messageId"), refs.has_variable("body"));
        let body_fields = selected_fields(program.expression());
        Ok(Self { program, attributes, system, message_id, body, body_fields })
    }

    /// Evaluate the expression on `record`.
    pub fn judge(&self, record: &Record) -> Judgement {
        ROOT.with(|root| {
            let mut context = root.new_inner_scope();
            if self.attributes {
                context.add_variable_from_value("attributes", string_map(&record.message_attributes));
            }
            if self.system {
                context.add_variable_from_value("system", string_map(&record.attributes));
            }
            if self.message_id {
                context.add_variable_from_value("messageId", record.message_id.as_str());
            }
            if self.body {
                context.add_variable_from_value("body", body(record, self.body_fields.as_ref()));
            }
            match self.program.execute(&context) {
                Ok(Value::Bool(true)) => Judgement::Match,
                Ok(Value::Bool(false)) => Judgement::Mismatch,
                Ok(other) => Judgement::Error(format!("gave a {}, not true or false", other.type_of())),
                Err(error) => Judgement::Error(describe(&error)),
            }
        })
    }
}

thread_local! {
    /// The standard functions, registered once per thread: a `cel::Context` is not `Sync`, and
    /// building one registers every function anew, which would cost more than most evaluations.
    static ROOT: Context<'static> = Context::default();
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    let map: HashMap<Key, Value> = map
        .iter()
        .map(|(k, v)| (Key::String(Arc::new(k.clone())), Value::String(Arc::new(v.clone()))))
        .collect();
    Value::Map(Map { map: Arc::new(map) })
}

/// The body as the expression sees it: parsed JSON (already parsed with `payload: json`), else
/// the text (lossy for bytes that are not UTF-8, which SQS does not send). `fields`: of a JSON
/// object, only these top-level fields.
fn body(record: &Record, fields: Option<&BTreeSet<String>>) -> Value {
    let parsed;
    let value = match &record.payload {
        Payload::Json(value) => value,
        Payload::Raw => match serde_json::from_slice::<serde_json::Value>(&record.body) {
            Ok(value) => {
                parsed = value;
                &parsed
            }
            Err(_) => return Value::String(Arc::new(String::from_utf8_lossy(&record.body).into_owned())),
        },
    };
    match (value, fields) {
        (serde_json::Value::Object(object), Some(fields)) => {
            let map: HashMap<Key, Value> = fields
                .iter()
                .filter_map(|f| object.get(f).map(|v| (Key::String(Arc::new(f.clone())), json(v))))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
        _ => json(value),
    }
}

/// The fields selected directly on `body` (`body.x`, `has(body.x)`), or `None` when `body` is used
/// in any other way (`size(body)`, `body['x']`, `body.startsWith(...)`, bound by a macro).
fn selected_fields(root: &IdedExpr) -> Option<BTreeSet<String>> {
    let mut fields = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        match &node.expr {
            Expr::Select(select) if matches!(&select.operand.expr, Expr::Ident(n) if n == "body") => {
                fields.insert(select.field.clone());
                continue;
            }
            Expr::Ident(name) if name == "body" => return None,
            Expr::Comprehension(c) if c.iter_var == "body" || c.iter_var2.as_deref() == Some("body") => {
                return None;
            }
            Expr::Call(call)
                if call
                    .target
                    .as_deref()
                    .is_some_and(|t| matches!(&t.expr, Expr::Ident(n) if n == "body")) =>
            {
                return None;
            }
            _ => {}
        }
        stack.extend(children(node));
    }
    Some(fields)
}

fn json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(json).collect())),
        serde_json::Value::Object(fields) => {
            let map: HashMap<Key, Value> =
                fields.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), json(v))).collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// One line naming the failure, without the values involved (they are the message's content).
fn describe(error: &ExecutionError) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("the message has no {key:?}: guard it with has()"),
        ExecutionError::UndeclaredReference(name) => format!("unknown name {name:?}"),
        ExecutionError::UnexpectedType { got, want } => format!("got a {got} where a {want} was expected"),
        ExecutionError::FunctionError { function, message } => format!("{function} failed: {message}"),
        ExecutionError::InvalidArgumentCount { .. } => error.to_string(),
        _ => "values of types the expression cannot combine (such as a string compared with a number)"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::FilterFate;

    use super::*;
    use crate::sink::testing::record;

    fn filter(expression: &str) -> Filter {
        let spec = FilterSpec {
            expression: expression.into(),
            on_mismatch: FilterFate::Delete,
            route_to: None,
            release_delay_seconds: None,
            on_error: sluice_crds::FilterErrorFate::DeadLetter,
        };
        Filter::compile(&spec).expect("compiles")
    }

    fn message(kind: &str, body: &str) -> Record {
        let mut r = record("m-1");
        r.message_attributes.insert("kind".into(), kind.into());
        r.attributes.insert("ApproximateReceiveCount".into(), "2".into());
        r.body = bytes::Bytes::from(body.to_owned());
        r
    }

    #[test]
    fn an_attribute_and_a_json_field_decide_together() {
        let f = filter("attributes.kind == 'order' && body.total > 100");
        assert_eq!(f.judge(&message("order", r#"{"total": 150}"#)), Judgement::Match);
        assert_eq!(f.judge(&message("order", r#"{"total": 50}"#)), Judgement::Mismatch);
        assert_eq!(f.judge(&message("refund", r#"{"total": 150}"#)), Judgement::Mismatch);
    }

    #[test]
    fn a_parsed_payload_and_system_attributes_are_seen() {
        let f =
            filter("body.region == 'eu' && int(system.ApproximateReceiveCount) == 2 && messageId == 'm-1'");
        let mut r = message("x", "ignored when parsed");
        r.payload = Payload::Json(serde_json::json!({"region": "eu"}));
        assert_eq!(f.judge(&r), Judgement::Match);
    }

    #[test]
    fn a_non_json_body_is_a_string() {
        let f = filter("body.startsWith('ping')");
        assert_eq!(f.judge(&message("x", "ping 1")), Judgement::Match);
        assert_eq!(f.judge(&message("x", "pong")), Judgement::Mismatch);
        // The interpreter reads a field of a non-map as false: a mismatch, not an error.
        assert_eq!(filter("body.region == 'eu'").judge(&message("x", "eu")), Judgement::Mismatch);
    }

    #[test]
    fn a_runtime_error_or_a_non_bool_is_an_error_without_the_content() {
        let Judgement::Error(missing) = filter("body.total > 1").judge(&message("x", r#"{"other": 1}"#))
        else {
            panic!("a missing key is an error");
        };
        assert!(missing.contains("\"total\""), "{missing}");
        let Judgement::Error(typed) = filter("body.total > 1").judge(&message("x", r#"{"total": "secret"}"#))
        else {
            panic!("a type mismatch is an error");
        };
        assert!(!typed.contains("secret"), "{typed}");
        let Judgement::Error(string) = filter("attributes.kind").judge(&message("x", "{}")) else {
            panic!("a string is not a verdict");
        };
        assert_eq!(string, "gave a string, not true or false");
    }

    #[test]
    fn only_the_selected_fields_of_a_body_are_built_and_the_answer_is_the_same() {
        let fields = |e: &str| selected_fields(Program::compile(e).expect("parses").expression());
        let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
        assert_eq!(
            fields("body.region == 'eu' && has(body.order) && body.order.total > 1"),
            names(&["order", "region"])
        );
        assert_eq!(fields("attributes.kind == 'a'"), names(&[]));
        for whole in
            ["size(body) > 1", "body['region'] == 'eu'", "body.startsWith('x')", "[1].exists(body, body > 0)"]
        {
            assert_eq!(fields(whole), None, "{whole}");
        }
        let f = filter("has(body.order) && body.order.items.exists(i, i.sku == 'A') && body.region == 'eu'");
        let order = r#"{"region":"eu","order":{"items":[{"sku":"A"}]},"other":{"deep":[1,2,3]}}"#;
        assert_eq!(f.judge(&message("x", order)), Judgement::Match);
        assert_eq!(f.judge(&message("x", r#"{"region":"eu"}"#)), Judgement::Mismatch);
    }

    #[test]
    fn has_guards_a_missing_field() {
        let f = filter("has(body.total) && body.total > 1");
        assert_eq!(f.judge(&message("x", r#"{"other": 1}"#)), Judgement::Mismatch);
    }
}
