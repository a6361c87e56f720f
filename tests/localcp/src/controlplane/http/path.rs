//! URL paths of the Kubernetes API, parsed into what they address.
//!
//! The API's paths are regular (`/api/v1` or `/apis/GROUP/VERSION`, then an optional
//! `namespaces/NS`, the plural, an optional name and subresource), so one parser serves every resource
//! type, including CRDs registered at runtime, instead of a route table per type.

/// A resource URL, decomposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// `namespaces/NS` segment, if present.
    pub namespace: Option<String>,
    /// Object name, if present.
    pub name: Option<String>,
    /// Subresource such as `status`, if present.
    pub subresource: Option<String>,
}

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/openapi/v3`: the index.
    OpenApiV3,
    /// `/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`: one group version's document.
    OpenApiV3Document {
        /// API group (empty for core).
        group: String,
        /// API version.
        version: String,
    },
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `/api`: core API versions.
    CoreVersions,
    /// `/apis`: the group list.
    Groups,
    /// `/apis/GROUP`: one group.
    Group(String),
    /// `/api/v1` or `/apis/GROUP/VERSION`: the resource list of a group version.
    Resources {
        /// API group (empty for core).
        group: String,
        /// API version.
        version: String,
    },
    /// An object or collection.
    Resource(ResourcePath),
    /// Anything else.
    Unknown,
}

/// Parses a request path (without the query).
pub fn parse(path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["openapi", "v3"] => return Route::OpenApiV3,
        ["openapi", "v3", "api", v] => {
            return Route::OpenApiV3Document { group: String::new(), version: (*v).to_owned() };
        }
        ["openapi", "v3", "apis", g, v] => {
            return Route::OpenApiV3Document { group: (*g).to_owned(), version: (*v).to_owned() };
        }
        ["openapi", "v2"] => return Route::OpenApiV2,
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group((*g).to_owned()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some((*ns).to_owned()), [&[*plural][..], tail].concat())
        }
        other => (None, other.to_vec()),
    };
    let base = |plural: &str| ResourcePath {
        group: group.to_owned(),
        version: version.to_owned(),
        plural: plural.to_owned(),
        namespace: namespace.clone(),
        name: None,
        subresource: None,
    };
    match rest.as_slice() {
        [] => Route::Resources { group: group.to_owned(), version: version.to_owned() },
        [plural] => Route::Resource(base(plural)),
        [plural, name] => Route::Resource(ResourcePath { name: Some((*name).to_owned()), ..base(plural) }),
        [plural, name, sub] => Route::Resource(ResourcePath {
            name: Some((*name).to_owned()),
            subresource: Some((*sub).to_owned()),
            ..base(plural)
        }),
        _ => Route::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match parse(path) {
            Route::Resource(r) => r,
            other => panic!("{path} parsed as {other:?}"),
        }
    }

    #[test]
    fn parses_core_group_and_namespaced_paths() {
        let r = res("/api/v1/namespaces/default/pods/p1/status");
        assert_eq!((r.group.as_str(), r.version.as_str(), r.plural.as_str()), ("", "v1", "pods"));
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("p1"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let r = res("/apis/apps/v1/deployments");
        assert_eq!((r.group.as_str(), r.namespace.clone(), r.name.clone()), ("apps", None, None));
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped() {
        let r = res("/api/v1/namespaces/default");
        assert_eq!(
            (r.plural.as_str(), r.name.as_deref(), r.namespace.clone()),
            ("namespaces", Some("default"), None)
        );
        let r = res("/api/v1/namespaces/x/status");
        assert_eq!(r.subresource.as_deref(), Some("status"));
        assert_eq!(res("/api/v1/namespaces").name, None);
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("/api"), Route::CoreVersions);
        assert_eq!(parse("/apis"), Route::Groups);
        assert_eq!(parse("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(parse("/apis/apps/v1"), Route::Resources { group: "apps".into(), version: "v1".into() });
        assert_eq!(parse("/version"), Route::Version);
        assert_eq!(
            parse("/openapi/v3/apis/sluice.dev/v1alpha1"),
            Route::OpenApiV3Document { group: "sluice.dev".into(), version: "v1alpha1".into() }
        );
        assert_eq!(
            parse("/openapi/v3/api/v1"),
            Route::OpenApiV3Document { group: String::new(), version: "v1".into() }
        );
        assert_eq!(parse("/nope"), Route::Unknown);
    }
}
