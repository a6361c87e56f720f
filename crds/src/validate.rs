//! The one way in for an SqsSource manifest: YAML or JSON in, a checked [`SqsSource`] out.
//!
//! The standalone reader, the local control plane (as admission) and the tests all go through
//! here, so a manifest is judged the same way everywhere, and the same way as a real apiserver
//! would: structural checks against the generated CRD schema, then typed decoding (which refuses
//! unknown fields), then the CRD's CEL rules. `serde_yaml` is deprecated upstream, so it is used
//! only in [`parse_source_yaml`].

mod error;
pub mod filter;
pub mod self_loop;
pub mod structural;

use std::sync::LazyLock;

use kube::{
    CustomResourceExt, Resource,
    core::cel::{CompiledSchema, compile_schema, validate_compiled},
};
use serde_json::Value;

pub use self::error::{SpecError, Violation};
pub use self::self_loop::{SelfLoop, self_loops};
use crate::SqsSource;

/// The CRD's `openAPIV3Schema`, generated once.
static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let crd = SqsSource::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the derived CRD has an openAPIV3Schema");
    serde_json::to_value(schema).expect("the CRD schema serializes to JSON")
});

/// The CRD's CEL rules, compiled once: compiling them per object would cost ~0.1 s each time.
static RULES: LazyLock<CompiledSchema> = LazyLock::new(|| compile_schema(source_schema()));

/// The CRD's CEL rules (`x-kubernetes-validations`), compiled.
pub fn compiled_rules() -> &'static CompiledSchema {
    &RULES
}

/// The generated CRD's `openAPIV3Schema` as JSON (what the apiserver validates against).
pub fn source_schema() -> &'static Value {
    &SCHEMA
}

/// Parses an SqsSource manifest (apiVersion, kind, metadata, spec) from YAML and validates it
/// like the apiserver would. The error lists every violation with its field path.
pub fn parse_source_yaml(text: &str) -> Result<SqsSource, SpecError> {
    let value: Value = serde_yaml::from_str(text)
        .map_err(|e| SpecError::new(vec![Violation::new("", format!("not valid YAML: {e}"))]))?;
    validate_source_value(&value)
}

/// Validates an SqsSource given as JSON: structure and bounds from the CRD schema, unknown
/// fields, then the CEL rules. Returns the typed object with defaults filled in.
pub fn validate_source_value(v: &Value) -> Result<SqsSource, SpecError> {
    let mut value = v.clone();
    let mut violations = check_envelope(&value);
    structural::prune_nulls(source_schema(), &mut value);
    if let Some(obj) = value.as_object_mut() {
        // apiVersion, kind and metadata are the apiserver's business, not the CRD schema's.
        let envelope: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
            .iter()
            .filter_map(|k| obj.remove(*k).map(|v| ((*k).to_owned(), v)))
            .collect();
        structural::check(source_schema(), &Value::Object(obj.clone()), "", &mut violations);
        obj.extend(envelope);
    }
    if !violations.is_empty() {
        return Err(SpecError::new(violations));
    }
    let source: SqsSource = serde_json::from_value(value)
        .map_err(|e| SpecError::new(vec![Violation::new("spec", format!("cannot be decoded: {e}"))]))?;
    check_cel(&source)?;
    // The CEL interpreter the apiserver runs cannot compile an expression held in a field; the
    // filter's is compiled here (and again by the operator and the reader).
    if let Some(violation) = filter::check(&source.spec) {
        return Err(SpecError::new(vec![violation]));
    }
    Ok(source)
}

/// apiVersion, kind and metadata.name: the parts of a manifest the CRD schema does not cover.
fn check_envelope(value: &Value) -> Vec<Violation> {
    let Some(obj) = value.as_object() else {
        return vec![Violation::new(
            "",
            "an SqsSource must be a mapping with apiVersion, kind, metadata and spec: check the document",
        )];
    };
    let mut out = Vec::new();
    let api_version = SqsSource::api_version(&());
    if obj.get("apiVersion").and_then(Value::as_str) != Some(&*api_version) {
        out.push(Violation::new(
            "apiVersion",
            format!("must be {api_version} (got {})", shown(obj.get("apiVersion"))),
        ));
    }
    let kind = SqsSource::kind(&());
    if obj.get("kind").and_then(Value::as_str) != Some(&*kind) {
        out.push(Violation::new("kind", format!("must be {kind} (got {})", shown(obj.get("kind")))));
    }
    match obj.get("metadata") {
        // A create may carry generateName instead; the server fills the name in.
        Some(Value::Object(meta)) if non_empty(meta.get("generateName")) => {}
        Some(Value::Object(meta)) => match meta.get("name") {
            name if non_empty(name) => {}
            other => out.push(Violation::new(
                "metadata.name",
                format!("must be a non-empty string naming the source (got {})", shown(other)),
            )),
        },
        other => out.push(Violation::new(
            "metadata",
            format!("must be a mapping with at least a name (got {})", shown(other)),
        )),
    }
    out
}

fn non_empty(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "nothing".to_owned(), Value::to_string)
}

/// Evaluates the CRD's `x-kubernetes-validations` rules on the typed object (defaults applied),
/// as the derived `SqsSource::validate_cel` does, with the rules compiled once.
fn check_cel(source: &SqsSource) -> Result<(), SpecError> {
    let object = serde_json::to_value(source).expect("an SqsSource serializes to JSON");
    validate_compiled(compiled_rules(), &object, None).map_err(|errors| {
        SpecError::new(
            errors
                .iter()
                .map(|e| Violation {
                    path: e.field_path.clone(),
                    message: e.message.clone(),
                    rule: Some(e.rule.clone()),
                })
                .collect(),
        )
    })
}
