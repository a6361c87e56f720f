//! CEL evaluation with the variables a ValidatingAdmissionPolicy sees.
//!
//! Why not kube-cel's `VapEvaluator`: it binds `request.userInfo` without `extra`, which is where the
//! API server puts the pod a ServiceAccount token is bound to, and it has no `variables`; both are
//! what the Sluice policy is written with. So this module builds the context itself from the same
//! pieces (kube's `cel` feature: the `cel` interpreter and kube-cel's Kubernetes function libraries,
//! such as `split` and `substring`).
//!
//! Differences from the API server: no type checking at policy creation (an expression that does not
//! compile fails when it is evaluated, which `failurePolicy` then decides), no cost limits, and
//! `variables` are evaluated eagerly in order; one that fails is left unbound, so only expressions
//! that use it fail, as with the API server's lazy evaluation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kube::core::cel::KubeCelExt;
use kube::core::cel::cel::objects::{Key, Map};
use kube::core::cel::cel::{Context, Program, Value as CelValue};
use serde_json::Value;

/// The top-level variables of an admission request.
pub struct Activation {
    context: Context<'static>,
    variables: HashMap<Key, CelValue>,
}

impl Activation {
    /// Binds `object`, `oldObject` (JSON null when absent), `request` and `params` (the binding's
    /// parameter object, JSON null when the policy takes none).
    pub fn new(object: &Value, old_object: &Value, request: &Value, params: &Value) -> Result<Self, String> {
        let mut context = Context::default();
        context.register_all();
        let bound = [("object", object), ("oldObject", old_object), ("request", request), ("params", params)];
        for (name, value) in bound {
            context.add_variable(name, value).map_err(|e| format!("cannot bind {name}: {e}"))?;
        }
        let mut activation = Self { context, variables: HashMap::new() };
        activation.bind_variables();
        Ok(activation)
    }

    /// Evaluates `expression` as `variables.<name>` for later expressions; a failure leaves it unbound.
    pub fn define(&mut self, name: &str, expression: &str) {
        if let Ok(value) = self.run(expression) {
            self.variables.insert(Key::String(Arc::new(name.to_owned())), value);
            self.bind_variables();
        }
    }

    /// Evaluates an expression that must yield a boolean.
    pub fn check(&self, expression: &str) -> Result<bool, String> {
        match self.run(expression)? {
            CelValue::Bool(b) => Ok(b),
            other => Err(format!("expression '{expression}' gave {} instead of a bool", type_name(&other))),
        }
    }

    /// Evaluates an expression that must yield a string (a `messageExpression`).
    pub fn string(&self, expression: &str) -> Result<String, String> {
        match self.run(expression)? {
            CelValue::String(s) => Ok((*s).clone()),
            other => Err(format!("expression '{expression}' gave {} instead of a string", type_name(&other))),
        }
    }

    fn run(&self, expression: &str) -> Result<CelValue, String> {
        compiled(expression)?
            .execute(&self.context)
            .map_err(|e| format!("expression '{expression}' failed: {e}"))
    }

    fn bind_variables(&mut self) {
        let map = CelValue::Map(Map { map: Arc::new(self.variables.clone()) });
        self.context.add_variable_from_value("variables", map);
    }
}

/// Compiled programs by expression text. Why: parsing is most of an evaluation's cost, and it
/// happens under the store's lock, on every ConfigMap write; the policies' expressions are few.
fn compiled(expression: &str) -> Result<Arc<Program>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Program>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let lock = || cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(program) = lock().get(expression) {
        return Ok(Arc::clone(program));
    }
    let program = Arc::new(
        Program::compile(expression).map_err(|e| format!("compilation failed for '{expression}': {e}"))?,
    );
    let mut cache = lock();
    // Bounded: policies that change all the time only cost recompiling.
    if cache.len() >= 1024 {
        cache.clear();
    }
    cache.insert(expression.to_owned(), Arc::clone(&program));
    Ok(program)
}

fn type_name(v: &CelValue) -> &'static str {
    match v {
        CelValue::Bool(_) => "a bool",
        CelValue::String(_) => "a string",
        CelValue::Int(_) | CelValue::UInt(_) | CelValue::Float(_) => "a number",
        CelValue::List(_) => "a list",
        CelValue::Map(_) => "a map",
        CelValue::Null => "null",
        _ => "another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variables_requests_and_kubernetes_string_functions_evaluate() {
        let request = json!({"userInfo": {"username": "system:serviceaccount:ns:orders-reader",
            "extra": {"authentication.kubernetes.io/pod-name": ["orders-reader-x"]}}, "name": "a"});
        let mut a = Activation::new(
            &json!({"metadata": {"name": "a"}}),
            &Value::Null,
            &request,
            &json!({"data": {"orders-reader": "orders"}}),
        )
        .unwrap();
        a.define("sa", "request.userInfo.username.split(':')[3]");
        a.define("source", "variables.sa.substring(0, size(variables.sa) - size('-reader'))");
        a.define("broken", "request.nope.deeper");
        assert!(a.check("variables.source == 'orders'").unwrap());
        assert!(a.check("variables.sa in params.data && params.data[variables.sa] == 'orders'").unwrap());
        assert!(a.check("!('metrics-reader' in params.data)").unwrap());
        assert!(a.check("'authentication.kubernetes.io/pod-name' in request.userInfo.extra").unwrap());
        assert!(a.check("oldObject == null && object.metadata.name == request.name").unwrap());
        assert_eq!(a.string("'lease of ' + variables.source").unwrap(), "lease of orders");
        assert!(a.check("variables.broken == 1").is_err(), "a failed variable stays unbound");
        assert!(a.check("variables.source").unwrap_err().contains("instead of a bool"));
    }
}
