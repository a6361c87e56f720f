//! `spec.filter.expression` checked the same way wherever a manifest is judged: here at apply
//! (standalone reader, local control plane, tests), in the operator (a condition) and in the
//! reader at start (exit 2).
//!
//! Why more than a parse: the `cel` interpreter only parses when it compiles, so a misspelt
//! variable (`atributes.kind`) or function (`startswith`) would compile and then fail on every
//! message, each one taking the mismatch fate: with `onMismatch: delete`, the whole queue. So the
//! expression is also walked for the names it uses: every free identifier must be one of
//! [`VARIABLES`] and every function one the reader's interpreter has.

use std::collections::BTreeSet;

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use super::Violation;
use crate::SqsSourceSpec;

/// The variables an expression sees (docs/filter.md and the CRD's description say what each is).
pub const VARIABLES: [&str; 4] = ["attributes", "system", "messageId", "body"];

/// The functions and methods of the `cel` interpreter's standard context (its `Context::default`),
/// the one the reader evaluates in. Operators (`_==_`, `@in`, ...) are not names a user writes.
const FUNCTIONS: &[&str] = &[
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "value",
    "hasValue",
    "or",
    "orValue",
    "matches",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

/// Parse `expression` and check the names it uses. The error is one line saying what to change.
pub fn compile(expression: &str) -> Result<Program, String> {
    let program = Program::compile(expression).map_err(|e| match e.errors.first() {
        Some(first) => format!(
            "is not a CEL expression: {} at line {} column {}: fix the expression",
            first.msg, first.pos.0, first.pos.1
        ),
        None => "is not a CEL expression: fix the expression".to_owned(),
    })?;
    let mut names = Names::default();
    names.walk(program.expression(), &mut Vec::new());
    if let Some(unknown) = names.variables.iter().next() {
        return Err(format!(
            "uses {unknown:?}, which is not a variable of a filter: use attributes, system, messageId or body"
        ));
    }
    if let Some(unknown) = names.functions.iter().next() {
        return Err(format!(
            "calls {unknown:?}, which the reader's CEL does not have: use the standard CEL functions (size, contains, startsWith, endsWith, matches, int, string, timestamp, ...)"
        ));
    }
    Ok(program)
}

/// `spec.filter` as a whole: the expression compiles and `routeTo` names one of `spec.sinks`
/// (the CRD's CEL says the latter too; the reader and the operator ask here). `None`: fine.
pub fn check(spec: &SqsSourceSpec) -> Option<Violation> {
    let filter = spec.filter.as_ref()?;
    if let Err(message) = compile(&filter.expression) {
        return Some(Violation::new("spec.filter.expression", message));
    }
    match &filter.route_to {
        Some(sink) if !spec.sinks.iter().any(|s| &s.name == sink) => Some(Violation::new(
            "spec.filter.routeTo",
            format!("names no sink in spec.sinks ({sink:?}): use the name of one of spec.sinks[].name"),
        )),
        _ => None,
    }
}

/// Unknown names found, sorted so the message is the same every time.
#[derive(Default)]
struct Names {
    variables: BTreeSet<String>,
    functions: BTreeSet<String>,
}

impl Names {
    /// Collect free identifiers not in [`VARIABLES`] and calls to unknown functions; `bound` holds
    /// the names comprehensions (`exists`, `all`, `map`, ...) bind around the current node.
    fn walk(&mut self, node: &IdedExpr, bound: &mut Vec<String>) {
        match &node.expr {
            Expr::Ident(name) => {
                let known =
                    name.starts_with('@') || VARIABLES.contains(&name.as_str()) || bound.contains(name);
                if !known {
                    self.variables.insert(name.clone());
                }
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, bound);
                self.walk(&c.accu_init, bound);
                let depth = bound.len();
                bound.push(c.iter_var.clone());
                bound.extend(c.iter_var2.iter().cloned());
                bound.push(c.accu_var.clone());
                for inner in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.walk(inner, bound);
                }
                bound.truncate(depth);
            }
            other => {
                if let Expr::Call(call) = other {
                    let operator = !call.func_name.starts_with(|c: char| c.is_ascii_alphabetic());
                    if !operator && !FUNCTIONS.contains(&call.func_name.as_str()) {
                        self.functions.insert(call.func_name.clone());
                    }
                }
                children(node).into_iter().for_each(|child| self.walk(child, bound));
            }
        }
    }
}

/// The expressions directly below `node`, in source order.
pub fn children(node: &IdedExpr) -> Vec<&IdedExpr> {
    match &node.expr {
        Expr::Call(call) => call.target.iter().map(|t| &**t).chain(call.args.iter()).collect(),
        Expr::Comprehension(c) => vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Struct(s) => s.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Select(select) => vec![&*select.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entry(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(pair) => vec![&pair.key, &pair.value],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_body_fields_compile() {
        for ok in [
            "attributes.kind == 'order' && body.total > 100",
            "has(body.items) && body.items.exists(i, i.sku.startsWith('A'))",
            "int(system.ApproximateReceiveCount) < 3 || messageId.endsWith('0')",
            "body.tags.all(t, size(t) > 0) && 'x' in attributes",
            "body.matches('^ping')",
        ] {
            assert!(compile(ok).is_ok(), "{ok}: {:?}", compile(ok).err());
        }
    }

    #[test]
    fn a_misspelt_variable_or_function_is_named() {
        let err = compile("atributes.kind == 'a'").unwrap_err();
        assert!(err.starts_with("uses \"atributes\", which is not a variable"), "{err}");
        let err = compile("body.items.exists(i, j > 1)").unwrap_err();
        assert!(err.contains("\"j\""), "a comprehension binds only its own names: {err}");
        let err = compile("body.name.startswith('a')").unwrap_err();
        assert!(err.starts_with("calls \"startswith\""), "{err}");
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_place() {
        let err = compile("attributes.kind == ").unwrap_err();
        assert!(err.starts_with("is not a CEL expression: "), "{err}");
        assert!(err.contains("line 1 column"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
