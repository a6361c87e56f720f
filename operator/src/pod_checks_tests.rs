use serde_json::json;

use crate::fixtures;
use crate::validate::{Problem, validate};

fn problems(edit: impl FnOnce(&mut sluice_crds::SqsSource)) -> Vec<Problem> {
    let mut source = fixtures::source(fixtures::ASSUME_ROLE);
    edit(&mut source);
    validate(&source, Some("img")).err().unwrap_or_default()
}

fn find<'a>(problems: &'a [Problem], reason: &str) -> &'a Problem {
    match problems.iter().find(|p| p.reason == reason) {
        Some(p) => p,
        None => panic!("no {reason} in {problems:?}"),
    }
}

#[test]
fn an_affinity_with_too_many_terms_is_refused_naming_the_field() {
    let term = json!({"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}});
    let affinity = |n: usize| json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": vec![term.clone(); n]}});
    assert!(problems(|s| s.spec.reader.affinity = serde_json::from_value(affinity(16)).ok()).is_empty());
    let found = problems(|s| s.spec.reader.affinity = serde_json::from_value(affinity(17)).ok());
    let p = find(&found, "ReaderAffinityTooLarge");
    assert_eq!(p.field, "spec.reader.affinity");
    assert!(p.message.starts_with("spec.reader.affinity has 17 terms: keep at most 16"), "{}", p.message);
}

#[test]
fn a_credential_header_written_inline_is_refused_and_a_secret_reference_suggested() {
    let found = problems(|s| {
        if let Some(http) = s.spec.sinks[0].http.as_mut() {
            http.headers.insert("Authorization".into(), "Bearer abc".into());
        }
    });
    let p = find(&found, "InlineSecretHeader");
    assert_eq!(p.field, "spec.sinks[0].http.headers.Authorization");
    assert!(p.message.contains("spec.sinks[0].http.secretRefs.headers"), "{}", p.message);
    assert!(!p.message.contains("abc"), "the message must not repeat the value");

    let found = problems(|s| {
        if let Some(http) = s.spec.sinks[0].http.as_mut() {
            http.headers.insert("X-Team".into(), "a".into());
            http.secret_refs = serde_json::from_value(json!({"headers": [
                {"name": "x-team", "secretKeyRef": {"name": "s", "key": "k"}}
            ]}))
            .ok();
        }
    });
    assert_eq!(find(&found, "HeaderDefinedTwice").field, "spec.sinks[0].http.secretRefs.headers");
}

#[test]
fn a_shaping_rule_is_enforced_even_on_an_object_stored_before_the_rule() {
    // Written straight into the typed object, as an apiserver without the rule would have kept it.
    let found = problems(|s| {
        s.spec.reader.env =
            serde_json::from_value(json!([{"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::1:role/x"}]))
                .unwrap_or_default();
        s.spec.reader.service_account.create = false;
    });
    let env = found.iter().find(|p| p.field == "spec.reader.env");
    let env = env.unwrap_or_else(|| panic!("no spec.reader.env problem in {found:?}"));
    assert_eq!(env.reason, "RuleViolated");
    assert!(env.message.contains("EKS identity webhook owns"), "{}", env.message);
    assert!(found.iter().any(|p| p.field == "spec.reader.serviceAccount.name"), "{found:?}");
}
