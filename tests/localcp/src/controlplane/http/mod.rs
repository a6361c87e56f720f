//! The HTTP face of the store: verbs and URLs in, `Status` objects or JSON out.
//!
//! One fallback handler parses every path with [`path::parse`] rather than registering routes per type,
//! because CRDs add resource types at runtime. The store is behind a `std::sync::Mutex` that is never
//! held across an `.await`; every write publishes the new resourceVersion on a `tokio::sync::watch`
//! channel that open watch streams wait on.

pub mod auth;
pub mod discovery;
mod jsonpath;
pub mod openapi;
pub mod path;
mod protobuf;
mod table;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use self::path::{ResourcePath, Route};
use super::admission::UserInfo;
use super::error::ApiError;
use super::patch::PatchKind;
use super::registry::ResourceType;
use super::selector::Selectors;
use super::store::{Propagation, Store, Subresource, meta_str};

/// State shared by all requests.
pub struct Shared {
    store: Mutex<Store>,
    changes: tokio::sync::watch::Sender<u64>,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Cancelled when the server stops: open watches end.
    pub shutdown: CancellationToken,
    /// `host:port` the server listens on, for discovery.
    pub address: String,
    /// Bearer tokens issued through TokenRequests, and their users.
    pub tokens: auth::Tokens,
    /// The process runner's pod logs (`<pod>.log`), for the `log` subresource.
    pub pod_log_dir: Option<std::path::PathBuf>,
}

impl Shared {
    /// Wraps a store.
    pub fn new(store: Store, bookmark_interval: Duration, address: String) -> Self {
        let (changes, _) = tokio::sync::watch::channel(store.resource_version());
        Self {
            store: Mutex::new(store),
            changes,
            bookmark_interval,
            shutdown: CancellationToken::new(),
            address,
            tokens: auth::Tokens::default(),
            pod_log_dir: None,
        }
    }

    /// Locks the store (a poisoned lock is recovered: the store has no invariants spanning a panic).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a write on behalf of `user` (whose writes are admitted) and wakes the watches.
    pub fn write_as<T>(&self, user: &UserInfo, f: impl FnOnce(&mut Store) -> T) -> T {
        self.write(|s| s.as_user(user.clone(), f))
    }

    /// Runs a write and wakes the watches.
    pub fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let mut store = self.store();
        let out = f(&mut store);
        self.changes.send_replace(store.resource_version());
        out
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Largest request body the API server reads (its `MaxRequestBodyBytes` default, 3 MiB); a larger one
/// is refused with a 413 Status, which is what kubectl reports for an oversized apply.
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// The router serving the API.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES)).with_state(shared)
}

type Params = HashMap<String, String>;

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error_response(&ApiError::too_large(MAX_REQUEST_BYTES));
        }
        Err(e) => return error_response(&ApiError::bad_request(format!("reading the request body: {e}"))),
    };
    let user = match shared.tokens.authenticate(&headers) {
        Ok(user) => user,
        Err(e) => return error_response(&e),
    };
    match route(&shared, &user, &method, uri.path(), &params, &headers, &body) {
        Ok(Reply::Json(code, v)) => (code, axum::Json(v)).into_response(),
        Ok(Reply::Text(text)) => ([(header::CONTENT_TYPE, "text/plain")], text).into_response(),
        Ok(Reply::Watch(w)) => watch::respond(shared, *w),
        Err(e) => error_response(&e),
    }
}

/// What a request produced.
enum Reply {
    Json(StatusCode, Value),
    /// A pod's log.
    Text(String),
    Watch(Box<watch::WatchRequest>),
}

fn ok(v: Value) -> Result<Reply, ApiError> {
    Ok(Reply::Json(StatusCode::OK, v))
}

fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(e.to_status())).into_response()
}

fn route(
    shared: &Shared,
    user: &UserInfo,
    method: &Method,
    path: &str,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let not_found = || ApiError::not_found("path", path);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type.contains("cbor") {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    let decoded;
    let body = if content_type.contains("protobuf") {
        decoded = protobuf::to_json(body)?;
        decoded.as_slice()
    } else {
        body
    };
    match path::parse(path) {
        Route::Version => ok(discovery::version()),
        Route::OpenApiV3 => ok(openapi::v3_index(&shared.store())),
        Route::OpenApiV3Document { group, version } => {
            openapi::v3_document(&shared.store(), &group, &version)
                .ok_or_else(not_found)
                .map(Reply::from_json)
        }
        Route::OpenApiV2 => ok(openapi::v2_document(&shared.store())),
        Route::Health => Ok(Reply::Json(StatusCode::OK, json!("ok"))),
        Route::CoreVersions => ok(discovery::core_versions(&shared.address)),
        Route::Groups => ok(discovery::groups(shared.store().registry())),
        Route::Group(g) => {
            discovery::group(shared.store().registry(), &g).ok_or_else(not_found).map(Reply::from_json)
        }
        Route::Resources { group, version } => {
            discovery::resources(shared.store().registry(), &group, &version)
                .ok_or_else(not_found)
                .map(Reply::from_json)
        }
        Route::Resource(p) => resource(shared, user, method, &p, params, headers, body),
        Route::Unknown => Err(not_found()),
    }
}

impl Reply {
    fn from_json(v: Value) -> Self {
        Self::Json(StatusCode::OK, v)
    }
}

fn resource(
    shared: &Shared,
    user: &UserInfo,
    method: &Method,
    p: &ResourcePath,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let rt =
        shared.store().registry().find(&p.group, &p.version, &p.plural).cloned().ok_or_else(|| {
            ApiError::not_found("the server could not find the requested resource", &p.plural)
        })?;
    let ns = p.namespace.as_deref().unwrap_or("");
    let sub = match p.subresource.as_deref() {
        None => Subresource::Main,
        Some("status") if rt.has_status => Subresource::Status,
        Some("token") if rt.group.is_empty() && rt.plural == "serviceaccounts" && *method == Method::POST => {
            let name = p.name.as_deref().unwrap_or_default();
            let issued = shared.tokens.issue(&shared.store(), user, ns, name, &parse_body(body)?)?;
            return Ok(Reply::Json(StatusCode::CREATED, issued));
        }
        Some("log") if rt.group.is_empty() && rt.plural == "pods" && *method == Method::GET => {
            let name = p.name.as_deref().unwrap_or_default();
            shared.store().get(&rt, ns, name)?;
            return pod_log(shared.pod_log_dir.as_deref(), name, params).map(Reply::Text);
        }
        Some(other) => return Err(ApiError::not_found(&format!("{}/{other}", rt.qualified_name()), "")),
    };
    let Some(name) = p.name.as_deref() else {
        let ns = p.namespace.as_deref();
        if *method == Method::GET && table::wanted(headers) && is_watch(params) {
            let include = params.get("includeObject").map(String::as_str);
            let req = watch::WatchRequest::from_params(rt.clone(), ns, selectors(params)?, params)?;
            return Ok(Reply::Watch(Box::new(req.in_tables(include))));
        }
        if *method == Method::GET && table::wanted(headers) {
            let store = shared.store();
            let (items, rv) = store.list(&rt, ns, &selectors(params)?);
            let include = params.get("includeObject").map(String::as_str);
            return ok(table::render(&rt, store.crd_of(&rt), &items, rv, include));
        }
        return collection(shared, user, method, &rt, ns, params, body);
    };
    match *method {
        Method::GET if sub == Subresource::Main && table::wanted(headers) => {
            let store = shared.store();
            let obj = store.get(&rt, ns, name)?;
            let include = params.get("includeObject").map(String::as_str);
            ok(table::render(&rt, store.crd_of(&rt), &[obj], store.resource_version(), include))
        }
        Method::GET => ok(shared.store().get(&rt, ns, name)?),
        Method::PUT => {
            let obj = parse_body(body)?;
            strict_fields(shared, &rt, params, &obj)?;
            ok(shared.write_as(user, |s| s.replace(&rt, ns, name, obj, sub))?)
        }
        Method::PATCH => {
            let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let force = params.get("force").is_some_and(|f| f == "true");
            let kind =
                PatchKind::from_content_type(ct, params.get("fieldManager").map(String::as_str), force)?;
            let patch = parse_body(body)?;
            strict_fields(shared, &rt, params, &patch)?;
            ok(shared.write_as(user, |s| s.patch(&rt, ns, name, &kind, &patch, sub))?)
        }
        Method::DELETE => {
            let (prop, precondition) = delete_options(params, body)?;
            ok(shared.write_as(user, |s| s.delete(&rt, ns, name, prop, precondition.as_deref()))?)
        }
        _ => Err(ApiError::method_not_allowed(format!("{method} is not supported on an object"))),
    }
}

fn collection(
    shared: &Shared,
    user: &UserInfo,
    method: &Method,
    rt: &ResourceType,
    ns: Option<&str>,
    params: &Params,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let selectors = selectors(params)?;
    match *method {
        Method::GET if is_watch(params) => {
            Ok(Reply::Watch(Box::new(watch::WatchRequest::from_params(rt.clone(), ns, selectors, params)?)))
        }
        Method::GET => {
            let (items, rv) = shared.store().list(rt, ns, &selectors);
            ok(list_json(rt, items, rv))
        }
        Method::POST => {
            let obj = parse_body(body)?;
            strict_fields(shared, rt, params, &obj)?;
            let created = shared.write_as(user, |s| s.create(rt, ns.unwrap_or(""), obj))?;
            Ok(Reply::Json(StatusCode::CREATED, created))
        }
        Method::DELETE => {
            let (prop, _) = delete_options(params, body)?;
            let deleted = shared.write_as(user, |s| {
                let (items, rv) = s.list(rt, ns, &selectors);
                let names: Vec<(String, String)> = items
                    .iter()
                    .map(|o| {
                        (
                            meta_str(o, "namespace").unwrap_or("").to_owned(),
                            meta_str(o, "name").unwrap_or("").to_owned(),
                        )
                    })
                    .collect();
                let gone: Vec<Value> =
                    names.iter().filter_map(|(n, name)| s.delete(rt, n, name, prop, None).ok()).collect();
                (gone, rv)
            });
            ok(list_json(rt, deleted.0, deleted.1))
        }
        _ => Err(ApiError::method_not_allowed(format!("{method} is not supported on a collection"))),
    }
}

fn selectors(params: &Params) -> Result<Selectors, ApiError> {
    Selectors::parse(
        params.get("labelSelector").map(String::as_str),
        params.get("fieldSelector").map(String::as_str),
    )
    .map_err(ApiError::bad_request)
}

fn is_watch(params: &Params) -> bool {
    params.get("watch").is_some_and(|w| w == "true" || w == "1")
}

fn list_json(rt: &ResourceType, items: Vec<Value>, rv: u64) -> Value {
    json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
           "metadata": {"resourceVersion": rv.to_string()}, "items": items})
}

/// A pod's output so far, from the process runner's log file (`tailLines` honoured; `follow` is
/// answered with what is there now, after which kubectl exits).
fn pod_log(dir: Option<&std::path::Path>, pod: &str, params: &Params) -> Result<String, ApiError> {
    let path = dir.map(|d| d.join(format!("{pod}.log")));
    let text = path.and_then(|p| std::fs::read_to_string(p).ok()).ok_or_else(|| {
        ApiError::bad_request(format!("pod {pod} has no log here: only the process runner's pods have logs"))
    })?;
    let Some(tail) = params.get("tailLines").and_then(|t| t.parse::<usize>().ok()) else { return Ok(text) };
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(tail);
    Ok(lines[start..].iter().map(|l| format!("{l}\n")).collect())
}

/// `fieldValidation=Strict` (what `kubectl apply` sends with validation on): a custom resource field
/// its CRD's schema does not declare is refused instead of pruned, as by the API server.
fn strict_fields(shared: &Shared, rt: &ResourceType, params: &Params, obj: &Value) -> Result<(), ApiError> {
    if params.get("fieldValidation").map(String::as_str) != Some("Strict") {
        return Ok(());
    }
    let unknown = openapi::unknown_fields(&shared.store(), rt, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = rt.kind,
        version = rt.version
    )))
}

/// A request body: JSON, or YAML (kubectl's apply sends YAML).
fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("the request body is neither JSON nor YAML: {e}")))
}

/// `propagationPolicy` and `preconditions.resourceVersion` from the query or a DeleteOptions body.
fn delete_options(params: &Params, body: &[u8]) -> Result<(Propagation, Option<String>), ApiError> {
    let opts: Value = if body.is_empty() { Value::Null } else { parse_body(body)? };
    let policy = params
        .get("propagationPolicy")
        .map(String::as_str)
        .or_else(|| opts.get("propagationPolicy").and_then(Value::as_str))
        .or_else(|| match opts.get("orphanDependents").and_then(Value::as_bool) {
            Some(true) => Some("Orphan"),
            _ => None,
        });
    let prop = policy.map(Propagation::parse).transpose()?.unwrap_or_default();
    let precondition =
        opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    Ok((prop, precondition))
}
