//! Every RBAC rule is traced to a call the code makes, and every call to a rule.
//!
//! The operator's calls are the `API_CALLS` consts kept next to the code that makes them; the
//! checkpoint coordinator's are listed below until that module exports its own. The readers' calls
//! are the rules of the shipped ClusterRole `sluice-reader`, which the operator binds by name
//! (`bind`) instead of holding what it grants. The test fails on a rule without a call, a call
//! without a rule, or a wildcard.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use serde::Deserialize;
use sluice_operator::access::ApiCall;

/// What `operator/src/checkpoint` (helper G) calls, until that module exports its own list: a
/// the lease ConfigMaps by label, get + apply of the checkpoint ConfigMap, and its status fields
/// (the sources come from the operator's `SourceCache`).
const CHECKPOINT_API_CALLS: &[ApiCall] = &[
    ApiCall::new("", "configmaps", "list"),
    ApiCall::new("", "configmaps", "get"),
    ApiCall::new("", "configmaps", "patch"),
    ApiCall::new("", "configmaps", "create"),
    ApiCall::new("sluice.dev", "sqssources/status", "patch"),
];

type Triple = (String, String, String);

fn triples(calls: &[&[ApiCall]]) -> BTreeSet<Triple> {
    calls
        .iter()
        .flat_map(|c| c.iter())
        .map(|c| (c.group.to_owned(), c.resource.to_owned(), c.verb.to_owned()))
        .collect()
}

/// Expands rules into (group, resource, verb); fails on wildcards and on non-resource rules.
fn expand(rules: &[PolicyRule]) -> BTreeSet<Triple> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        assert!(rule.non_resource_urls.is_none(), "unexpected nonResourceURLs rule: {rule:?}");
        for field in [&groups, &resources, &rule.verbs] {
            assert!(!field.iter().any(|v| v.contains('*')), "wildcard in {rule:?}");
        }
        for g in &groups {
            for r in &resources {
                for v in &rule.verbs {
                    out.insert((g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
    out
}

fn documents<T: for<'de> Deserialize<'de>>(text: &str) -> Vec<T> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde_yaml::Value::deserialize(doc).unwrap_or_default())
        .filter(|v| v.get("kind").is_some())
        .filter_map(|v| serde_yaml::from_value(v).ok())
        .collect()
}

fn kind_of(doc: &serde_yaml::Value) -> String {
    doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_owned()
}

/// The permissions the deploy/ manifests give the operator.
fn operator_rules() -> BTreeSet<Triple> {
    let cluster_role = include_str!("../../deploy/operator/clusterrole.yaml");
    let leader = include_str!("../../deploy/operator/leader-election.yaml");
    let mut rules = BTreeSet::new();
    for role in documents::<ClusterRole>(cluster_role) {
        rules.extend(expand(&role.rules.unwrap_or_default()));
    }
    let leader_docs: Vec<serde_yaml::Value> = documents(leader);
    for doc in leader_docs.into_iter().filter(|d| kind_of(d) == "Role") {
        let role: Role = match serde_yaml::from_value(doc) {
            Ok(r) => r,
            Err(e) => panic!("leader-election Role does not parse: {e}"),
        };
        rules.extend(expand(&role.rules.unwrap_or_default()));
    }
    rules
}

fn operator_calls() -> BTreeSet<Triple> {
    triples(&[
        sluice_operator::controller::API_CALLS,
        sluice_operator::source_cache::API_CALLS,
        sluice_operator::apply::API_CALLS,
        sluice_operator::reader_register::API_CALLS,
        sluice_operator::status::API_CALLS,
        sluice_operator::events::API_CALLS,
        sluice_operator::leader::elector::API_CALLS,
        sluice_operator::scaler::API_CALLS,
        CHECKPOINT_API_CALLS,
        sluice_operator::sink_health::API_CALLS,
        sluice_operator::replay::API_CALLS,
    ])
}

/// The shipped ClusterRole the readers are bound to.
fn readers_cluster_role() -> ClusterRole {
    let roles = documents::<ClusterRole>(include_str!("../../deploy/operator/reader-clusterrole.yaml"));
    match roles.as_slice() {
        [role] => role.clone(),
        other => panic!("reader-clusterrole.yaml holds {} ClusterRoles, not one", other.len()),
    }
}

/// The RoleBinding the operator builds for the fixture source.
fn readers_binding() -> RoleBinding {
    let source = match serde_yaml::from_str(include_str!("fixtures/basic.yaml")) {
        Ok(s) => s,
        Err(e) => panic!("fixture: {e}"),
    };
    let valid = match sluice_operator::validate::validate(&source, Some("img")) {
        Ok(v) => v,
        Err(p) => panic!("fixture invalid: {p:?}"),
    };
    match sluice_operator::build::build(&valid) {
        Ok(children) => children.role_binding,
        Err(e) => panic!("build: {e}"),
    }
}

/// The operator's rules that name resources (`resourceNames`), as (rule's triples, names).
fn named_rules() -> Vec<(BTreeSet<Triple>, Vec<String>)> {
    documents::<ClusterRole>(include_str!("../../deploy/operator/clusterrole.yaml"))
        .into_iter()
        .flat_map(|role| role.rules.unwrap_or_default())
        .filter_map(|rule| {
            let names = rule.resource_names.clone()?;
            Some((expand(std::slice::from_ref(&rule)), names))
        })
        .collect()
}

#[test]
fn every_operator_rule_has_a_call_and_every_call_a_rule() {
    let rules = operator_rules();
    let calls = operator_calls();
    let unused: Vec<_> = rules.difference(&calls).collect();
    let missing: Vec<_> = calls.difference(&rules).collect();
    assert!(unused.is_empty(), "rules no code needs (remove them): {unused:?}");
    assert!(missing.is_empty(), "calls no rule allows (add rules): {missing:?}");
}

#[test]
fn the_readers_cluster_role_matches_the_readers_calls() {
    let role = readers_cluster_role();
    assert_eq!(role.metadata.name.as_deref(), Some(sluice_operator::names::READER_CLUSTER_ROLE));
    let rules = expand(&role.rules.unwrap_or_default());
    let calls = triples(&[sluice_operator::build::rbac::READER_API_CALLS]);
    assert_eq!(rules, calls);
}

#[test]
fn the_operator_may_bind_the_readers_cluster_role_and_no_other_role() {
    let binding = readers_binding();
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, sluice_operator::names::READER_CLUSTER_ROLE);
    let bind = |(_, _, verb): &Triple| verb == "bind" || verb == "escalate";
    let named = named_rules();
    let bind_rules: Vec<_> = named.iter().filter(|(triples, _)| triples.iter().any(bind)).collect();
    assert_eq!(bind_rules.len(), 1, "one rule with bind, limited by resourceNames: {named:?}");
    let (triples, names) = bind_rules[0];
    let expected = ("rbac.authorization.k8s.io".to_owned(), "clusterroles".to_owned(), "bind".to_owned());
    assert_eq!(triples.iter().collect::<Vec<_>>(), vec![&expected]);
    assert_eq!(names, &vec![binding.role_ref.name.clone()]);
    let unnamed: Vec<_> = operator_rules().into_iter().filter(bind).collect();
    assert_eq!(unnamed, vec![expected], "no escalate, and bind only by name");
}

#[test]
fn the_operator_writes_no_role() {
    let roles: Vec<_> = operator_rules()
        .into_iter()
        .filter(|(group, resource, verb)| {
            group == "rbac.authorization.k8s.io"
                && matches!(resource.as_str(), "roles" | "clusterroles")
                && verb != "bind"
        })
        .collect();
    assert!(roles.is_empty(), "{roles:?}");
}

#[test]
fn the_operator_never_touches_secrets_or_deletes() {
    for (group, resource, verb) in operator_rules() {
        assert!(resource != "secrets", "{group}/{resource} {verb}");
        assert!(verb != "delete" && verb != "deletecollection", "{group}/{resource} {verb}");
    }
}
