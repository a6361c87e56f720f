//! The decision: which bindings apply to a request, and what their policies say about it.

use serde_json::Value;

use super::Request;
use super::cel::Activation;
use super::policy::{BindingSpec, Object, PolicySpec, Target, read};
use crate::controlplane::error::{ApiError, Cause, Result};

/// Admits `request` against stored `policies` and `bindings` (JSON objects as the store keeps them):
/// `Ok` unless a binding with the `Deny` action binds a policy that refuses it.
pub fn evaluate(policies: &[Value], bindings: &[Value], request: &Request<'_>) -> Result<()> {
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
        // Fresh per policy: `variables` are the policy's own.
        let mut activation = bind(request)?;
        let Some(refusal) = decide(&policy, &mut activation) else { continue };
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

/// The variables of a request.
fn bind(request: &Request<'_>) -> Result<Activation> {
    let null = Value::Null;
    Activation::new(request.object.unwrap_or(&null), request.old_object.unwrap_or(&null), &request.variable())
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
    if spec.param_kind.is_some() {
        return failure("policy parameters (paramKind) are not supported by the local control plane".into());
    }
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
