//! The decision: which bindings apply to a request, and what their policies say about it.

use serde_json::Value;

use super::Request;
use super::cel::Activation;
use super::policy::{BindingSpec, Object, ParamKind, PolicySpec, Target, read};
use crate::controlplane::error::{ApiError, Cause, Result};

/// Finds a parameter object: its kind, namespace (empty for a cluster-scoped kind) and name.
pub type ParamLookup<'a> = dyn Fn(&ParamKind, &str, &str) -> Option<Value> + 'a;

/// Admits `request` against stored `policies` and `bindings` (JSON objects as the store keeps them):
/// `Ok` unless a binding with the `Deny` action binds a policy that refuses it. `params` finds the
/// parameter object a binding's `paramRef` names.
pub fn evaluate(
    policies: &[Value],
    bindings: &[Value],
    request: &Request<'_>,
    params: &ParamLookup<'_>,
) -> Result<()> {
    let resource = request.resource_path();
    let target = Target {
        group: &request.resource.group,
        version: &request.resource.version,
        resource: &resource,
        operation: request.operation.as_str(),
        name: request.name,
    };
    for binding in bindings {
        let binding = match read::<BindingSpec>(binding) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("ValidatingAdmissionPolicyBinding skipped: {e}");
                continue;
            }
        };
        if binding.spec.match_resources.as_ref().is_some_and(|m| !m.matches(&target)) {
            continue;
        }
        let Some(policy) = policies
            .iter()
            .find(|p| p.pointer("/metadata/name").and_then(Value::as_str) == Some(&binding.spec.policy_name))
        else {
            continue;
        };
        let policy = match read::<PolicySpec>(policy) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("ValidatingAdmissionPolicy skipped: {e}");
                continue;
            }
        };
        if !policy.spec.match_constraints.matches(&target) {
            continue;
        }
        let refusal = match param(&policy.spec, &binding.spec, request, params) {
            Param::NotFoundAllowed => continue,
            Param::Refused(refusal) => Some(refusal),
            Param::Found(value) => {
                // Fresh per policy: `variables` are the policy's own.
                let mut activation = bind(request, &value)?;
                decide(&policy, &mut activation)
            }
        };
        let Some(refusal) = refusal else { continue };
        let message = format!(
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
            policy.name, binding.name, refusal.message
        );
        if binding.spec.validation_actions.iter().any(|a| a == "Deny") {
            return Err(denied(request, &refusal.reason, message));
        }
        let actions = binding.spec.validation_actions.join(", ");
        tracing::warn!("{message} (binding actions [{actions}]: not enforced)");
    }
    Ok(())
}

/// What a binding's `paramRef` gives the policy.
enum Param {
    /// The parameter object (`null` for a policy without `paramKind`).
    Found(Value),
    /// None found, and the binding says `parameterNotFoundAction: Allow`.
    NotFoundAllowed,
    /// None found and the binding denies, or the reference cannot be followed.
    Refused(Refusal),
}

/// Follows a binding's `paramRef` as the API server does: the named object of the policy's
/// `paramKind`, in the reference's namespace or else in the request's.
fn param(
    policy: &PolicySpec,
    binding: &BindingSpec,
    request: &Request<'_>,
    params: &ParamLookup<'_>,
) -> Param {
    let Some(kind) = &policy.param_kind else { return Param::Found(Value::Null) };
    let fail_closed = policy.failure_policy.as_deref() != Some("Ignore");
    let failure = |message: String| {
        if fail_closed {
            Param::Refused(Refusal { reason: "Invalid".to_owned(), message })
        } else {
            Param::NotFoundAllowed
        }
    };
    let Some(reference) = &binding.param_ref else {
        return failure(format!(
            "the policy takes a {} parameter but the binding has no paramRef",
            kind.kind
        ));
    };
    let (Some(name), None) = (&reference.name, &reference.selector) else {
        return failure(
            "paramRef.selector is not supported by the local control plane; name the parameter".into(),
        );
    };
    let namespace = reference.namespace.as_deref().unwrap_or(request.namespace);
    match params(kind, namespace, name) {
        Some(found) => Param::Found(found),
        None if reference.parameter_not_found_action.as_deref() == Some("Allow") => Param::NotFoundAllowed,
        None => Param::Refused(Refusal {
            reason: "Invalid".to_owned(),
            message: "no params found for policy binding with `Deny` parameterNotFoundAction".to_owned(),
        }),
    }
}

/// The variables of a request, with the parameter object as `params`.
fn bind(request: &Request<'_>, params: &Value) -> Result<Activation> {
    let null = Value::Null;
    Activation::new(
        request.object.unwrap_or(&null),
        request.old_object.unwrap_or(&null),
        &request.variable(),
        params,
    )
    .map_err(|e| ApiError {
        code: 500,
        reason: "InternalError",
        message: e,
        causes: Vec::new(),
        subject: None,
    })
}

/// Why a policy refuses a request.
struct Refusal {
    reason: String,
    message: String,
}

/// Evaluates one policy: `None` when it does not apply or allows the request.
fn decide(policy: &Object<PolicySpec>, activation: &mut Activation) -> Option<Refusal> {
    let spec = &policy.spec;
    let fail_closed = spec.failure_policy.as_deref() != Some("Ignore");
    let failure = |message: String| fail_closed.then(|| Refusal { reason: "Invalid".to_owned(), message });
    let mut condition_error = None;
    for condition in &spec.match_conditions {
        match activation.check(&condition.expression) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => condition_error = Some(format!("matchCondition '{}': {e}", condition.name)),
        }
    }
    if let Some(error) = condition_error {
        return failure(error);
    }
    for variable in &spec.variables {
        activation.define(&variable.name, &variable.expression);
    }
    for validation in &spec.validations {
        match activation.check(&validation.expression) {
            Ok(true) => {}
            Ok(false) => {
                let message = validation
                    .message_expression
                    .as_deref()
                    .and_then(|m| activation.string(m).ok())
                    .or_else(|| validation.message.clone())
                    .unwrap_or_else(|| format!("failed expression: {}", validation.expression));
                let reason = validation.reason.clone().unwrap_or_else(|| "Invalid".to_owned());
                return Some(Refusal { reason, message });
            }
            Err(e) => {
                if let Some(refusal) = failure(e) {
                    return Some(refusal);
                }
            }
        }
    }
    None
}

/// The API server's denial: `<resource> "<name>" is forbidden: <message>`, code from the reason.
fn denied(request: &Request<'_>, reason: &str, message: String) -> ApiError {
    let (code, reason) = match reason {
        "Unauthorized" => (401, "Unauthorized"),
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    ApiError {
        code,
        reason,
        message: format!(
            "{} \"{}\" is forbidden: {message}",
            request.resource.qualified_name(),
            request.name
        ),
        causes: vec![Cause { field: String::new(), message }],
        subject: None,
    }
}
