//! Operator checks of the reader pod's shaping and of secret material the CRD schema cannot
//! judge alone: the size of an affinity (its Kubernetes lists carry no bounds of their own), and
//! credentials written inline where the config ConfigMap would publish them. The schema and CEL
//! rules of `spec.reader` are run here too: the readers' rendering leaves the pod shaping out, so
//! the operator's check of that rendering would not see an object stored before a rule existed.
//!
//! Why inline credentials are refused rather than moved: the operator never reads Secrets, so it
//! cannot move a value into one; the message says how to reference a Secret instead.

use k8s_openapi::api::core::v1::Affinity;
use sluice_crds::{SinkSpec, SqsSource};

use crate::validate::Problem;

/// Most node-selector and pod-affinity terms (required and preferred, all kinds) in
/// `spec.reader.affinity`; beyond this the scheduler's work per reader pod grows for no use.
pub const MAX_AFFINITY_TERMS: usize = 16;

/// Header names whose values are credentials by convention (compared without case).
const CREDENTIAL_HEADERS: &[&str] =
    &["authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"];

/// Appends a [`Problem`] for each fault found.
pub fn check(source: &SqsSource, problems: &mut Vec<Problem>) {
    let spec = &source.spec;
    check_shaping_rules(source, problems);
    if let Some(affinity) = &spec.reader.affinity {
        let terms = affinity_terms(affinity);
        if terms > MAX_AFFINITY_TERMS {
            problems.push(problem(
                "ReaderAffinityTooLarge",
                "spec.reader.affinity",
                format!("spec.reader.affinity has {terms} terms: keep at most {MAX_AFFINITY_TERMS} (merge the terms or use nodeSelector)"),
            ));
        }
    }
    let sinks = spec.sinks.iter().enumerate().map(|(i, s)| (format!("spec.sinks[{i}]"), s));
    let dead = spec.dead_letter_sink.iter().map(|s| ("spec.deadLetterSink".to_owned(), s));
    for (field, sink) in sinks.chain(dead) {
        check_http_headers(&field, sink, problems);
    }
}

fn check_http_headers(field: &str, sink: &SinkSpec, problems: &mut Vec<Problem>) {
    let Some(http) = &sink.http else { return };
    for name in http.headers.keys() {
        if CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            problems.push(problem(
                "InlineSecretHeader",
                &format!("{field}.http.headers.{name}"),
                format!("{field}.http.headers.{name} holds a credential in plain text, which the config ConfigMap would publish: move it to a Secret and reference it in {field}.http.secretRefs.headers"),
            ));
        }
    }
    let from_secrets = http.secret_refs.iter().flat_map(|s| &s.headers);
    for header in from_secrets {
        if http.headers.keys().any(|k| k.eq_ignore_ascii_case(&header.name)) {
            problems.push(problem(
                "HeaderDefinedTwice",
                &format!("{field}.http.secretRefs.headers"),
                format!("{field}.http header {} is set both inline and from a Secret: keep one", header.name),
            ));
        }
    }
}

/// The CRD's schema and CEL rules for the fields under `spec.reader` that the readers' rendering
/// leaves out.
fn check_shaping_rules(source: &SqsSource, problems: &mut Vec<Problem>) {
    let Ok(value) = serde_json::to_value(source) else { return };
    let Err(error) = sluice_crds::validate::validate_source_value(&value) else { return };
    let shaping = error.violations().iter().filter(|v| v.path.starts_with("spec.reader."));
    for violation in shaping.filter(|v| !is_rendered(&v.path)) {
        let reason = if violation.rule.is_some() { "RuleViolated" } else { "SchemaViolated" };
        problems.push(problem(reason, &violation.path, format!("{}: {}", violation.path, violation.message)));
    }
}

/// Fields of `spec.reader` that the readers' rendering keeps (checked with it elsewhere).
fn is_rendered(path: &str) -> bool {
    ["spec.reader.image", "spec.reader.logLevel", "spec.reader.terminationGracePeriodSeconds"].contains(&path)
}

/// All node-selector terms and pod (anti-)affinity terms, required and preferred.
pub fn affinity_terms(affinity: &Affinity) -> usize {
    let node = affinity.node_affinity.as_ref().map_or(0, |n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
            .map_or(0, |r| r.node_selector_terms.len())
            + n.preferred_during_scheduling_ignored_during_execution.as_ref().map_or(0, Vec::len)
    });
    let pod = affinity.pod_affinity.as_ref().map_or(0, |p| {
        p.required_during_scheduling_ignored_during_execution.as_ref().map_or(0, Vec::len)
            + p.preferred_during_scheduling_ignored_during_execution.as_ref().map_or(0, Vec::len)
    });
    let anti = affinity.pod_anti_affinity.as_ref().map_or(0, |p| {
        p.required_during_scheduling_ignored_during_execution.as_ref().map_or(0, Vec::len)
            + p.preferred_during_scheduling_ignored_during_execution.as_ref().map_or(0, Vec::len)
    });
    node + pod + anti
}

fn problem(reason: &'static str, field: &str, message: String) -> Problem {
    Problem { reason, field: field.to_owned(), message }
}

#[cfg(test)]
#[path = "pod_checks_tests.rs"]
mod tests;
