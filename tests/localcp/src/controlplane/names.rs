//! Object name rules, per kind, as the API server applies them on create.
//!
//! A name the harness accepted but a cluster refuses (`Orders`, `a_b`, 300 characters) would pass every
//! local test and fail on the first real apply, so the same three rules apply here: most kinds,
//! custom resources included, need an RFC 1123 subdomain; Namespaces and Services need an RFC 1123
//! label (they become DNS labels); RBAC kinds only need a valid path segment (`system:controller` is a
//! legal ClusterRole name). The messages are the API server's own.

use super::error::Cause;
use super::registry::ResourceType;

const SUBDOMAIN_MAX: usize = 253;
const LABEL_MAX: usize = 63;

/// Which rule a kind's names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Subdomain,
    Label,
    PathSegment,
}

fn rule(rt: &ResourceType) -> Rule {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces" | "services") => Rule::Label,
        ("rbac.authorization.k8s.io", _) => Rule::PathSegment,
        _ => Rule::Subdomain,
    }
}

/// Checks `name` for an object of `rt`; `Err` is the `metadata.name` cause the API server reports.
pub fn check(rt: &ResourceType, name: &str) -> Result<(), Cause> {
    let problem = match rule(rt) {
        Rule::Subdomain => subdomain_problem(name),
        Rule::Label => label_problem(name),
        Rule::PathSegment => path_segment_problem(name),
    };
    match problem {
        None => Ok(()),
        Some(why) => {
            Err(Cause { field: "metadata.name".into(), message: format!("Invalid value: \"{name}\": {why}") })
        }
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

fn is_label(part: &str) -> bool {
    let starts_ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    starts_ends(part.chars().next()) && starts_ends(part.chars().last()) && part.chars().all(is_label_char)
}

fn subdomain_problem(name: &str) -> Option<String> {
    if name.len() > SUBDOMAIN_MAX {
        return Some(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    if name.split('.').all(is_label) {
        return None;
    }
    Some(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
         and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
         validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            .into(),
    )
}

fn label_problem(name: &str) -> Option<String> {
    if name.len() > LABEL_MAX {
        return Some(format!("must be no more than {LABEL_MAX} characters"));
    }
    if is_label(name) {
        return None;
    }
    Some(
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
         start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
         validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            .into(),
    )
}

fn path_segment_problem(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!("may not be '{name}'"));
    }
    ['/', '%'].iter().find(|c| name.contains(**c)).map(|c| format!("may not contain '{c}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::registry::Registry;

    fn of(group: &str, plural: &str) -> ResourceType {
        Registry::with_builtins().find(group, "v1", plural).cloned().expect("a built-in type")
    }

    #[test]
    fn subdomain_kinds_refuse_uppercase_underscores_and_long_names() {
        let cm = of("", "configmaps");
        assert!(check(&cm, "orders.reader-0").is_ok());
        for bad in ["Orders", "a_b", "-a", "a-", "a..b", ""] {
            let cause = check(&cm, bad).unwrap_err();
            assert_eq!(cause.field, "metadata.name");
            assert!(cause.message.contains("RFC 1123 subdomain"), "{bad}: {}", cause.message);
        }
        assert!(check(&cm, &"a".repeat(253)).is_ok());
        assert!(check(&cm, &"a".repeat(254)).unwrap_err().message.contains("no more than 253 characters"));
    }

    #[test]
    fn namespaces_and_services_need_a_label() {
        assert!(check(&of("", "namespaces"), "a.b").unwrap_err().message.contains("RFC 1123 label"));
        assert!(check(&of("", "services"), &"a".repeat(64)).unwrap_err().message.contains("63"));
        assert!(check(&of("", "services"), "orders-metrics").is_ok());
    }

    #[test]
    fn rbac_names_are_path_segments() {
        let roles = of("rbac.authorization.k8s.io", "clusterroles");
        assert!(check(&roles, "system:controller:Sluice").is_ok());
        assert!(check(&roles, "a/b").unwrap_err().message.contains("may not contain '/'"));
        assert!(check(&roles, "..").is_err());
    }
}
