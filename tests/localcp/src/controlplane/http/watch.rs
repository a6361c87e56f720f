//! Watch streams: newline-delimited JSON events, from a resourceVersion, until a timeout.
//!
//! This follows the API server's watch-cache behaviour that kube-runtime's watcher is built around:
//! a watch from `""`/`"0"` (or with `sendInitialEvents`) first sends the current objects as ADDED; a
//! watch from a version older than the retained history gets HTTP 200 and one `ERROR` event carrying a
//! `410 Expired` Status (the watcher then re-lists); bookmarks carry only the resourceVersion the client
//! is up to date with; the stream ends after `timeoutSeconds`, and when the server stops.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Shared, table};
use crate::controlplane::error::ApiError;
use crate::controlplane::registry::ResourceType;
use crate::controlplane::selector::Selectors;
use crate::controlplane::store::{Store, present, type_key};

/// Default and maximum `timeoutSeconds` (the API server's `--min-request-timeout` is 1800).
const MAX_TIMEOUT_SECS: u64 = 1800;

/// A parsed watch request.
pub struct WatchRequest {
    rt: ResourceType,
    namespace: Option<String>,
    selectors: Selectors,
    /// `None`: start with the current objects as ADDED.
    from: Option<u64>,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    /// `Some(includeObject)`: each event's object is a one-row Table (`kubectl get -w`).
    table: Option<Option<String>>,
}

impl WatchRequest {
    /// Reads `resourceVersion`, `timeoutSeconds`, `allowWatchBookmarks` and `sendInitialEvents`.
    pub fn from_params(
        rt: ResourceType,
        namespace: Option<&str>,
        selectors: Selectors,
        params: &HashMap<String, String>,
    ) -> Result<Self, ApiError> {
        let from = match params.get("resourceVersion").map(String::as_str) {
            None | Some("" | "0") => None,
            Some(rv) => Some(
                rv.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv}")))?,
            ),
        };
        let timeout = params
            .get("timeoutSeconds")
            .map(|t| {
                t.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t}")))
            })
            .transpose()?
            .unwrap_or(MAX_TIMEOUT_SECS)
            .min(MAX_TIMEOUT_SECS);
        let flag = |k: &str| params.get(k).is_some_and(|v| v == "true" || v == "1");
        Ok(Self {
            rt,
            namespace: namespace.map(str::to_owned),
            selectors,
            from,
            send_initial: flag("sendInitialEvents"),
            bookmarks: flag("allowWatchBookmarks"),
            timeout: Duration::from_secs(timeout),
            table: None,
        })
    }

    /// Sends each object as a one-row Table, as the API server does for `as=Table` watches.
    pub fn in_tables(mut self, include: Option<&str>) -> Self {
        self.table = Some(include.map(str::to_owned));
        self
    }

    /// The object of an event: as served through the type, or its Table row.
    fn event_object(&self, store: &Store, presented: Value, rv: u64) -> Value {
        match &self.table {
            Some(include) => {
                table::render(&self.rt, store.crd_of(&self.rt), &[presented], rv, include.as_deref())
            }
            None => presented,
        }
    }

    fn wants(&self, group: &str, plural: &str, obj: &Value) -> bool {
        let (own_group, own_plural) = type_key(&self.rt);
        group == own_group
            && plural == own_plural
            && self.namespace.as_deref().is_none_or(|ns| {
                obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("") == ns
            })
            && self.selectors.matches(obj)
    }

    fn present(&self, obj: &Value) -> Value {
        present(&self.rt, obj)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta}})
    }
}

/// The state a stream carries between chunks.
struct Cursor {
    req: WatchRequest,
    shared: Arc<Shared>,
    rx: tokio::sync::watch::Receiver<u64>,
    /// Last resourceVersion whose events were all considered.
    rv: u64,
    pending: VecDeque<Value>,
    deadline: Instant,
    next_bookmark: Instant,
    done: bool,
}

impl Cursor {
    /// Queues the events after `self.rv`, or a 410 ERROR (and the end) if they are gone.
    fn catch_up(&mut self, store: &Store) {
        match store.history().after(self.rv) {
            Ok(events) => {
                for e in events {
                    if self.req.wants(&e.group, &e.plural, &e.object) {
                        let object = self.req.event_object(store, self.req.present(&e.object), e.rv);
                        self.pending.push_back(json!({"type": e.kind.as_str(), "object": object}));
                    }
                }
                self.rv = store.resource_version();
            }
            Err(e) => {
                self.pending.push_back(json!({"type": "ERROR", "object": e.to_status()}));
                self.done = true;
            }
        }
    }
}

/// Starts the stream for a watch request.
pub fn respond(shared: Arc<Shared>, req: WatchRequest) -> Response {
    let rx = shared.subscribe();
    let now = Instant::now();
    let mut cursor = Cursor {
        deadline: now + req.timeout,
        next_bookmark: now + shared.bookmark_interval,
        rv: 0,
        pending: VecDeque::new(),
        done: false,
        rx,
        shared: Arc::clone(&shared),
        req,
    };
    {
        let store = shared.store();
        match cursor.req.from {
            Some(rv) if !cursor.req.send_initial => {
                cursor.rv = rv;
                cursor.catch_up(&store);
            }
            _ => {
                let (items, rv) =
                    store.list(&cursor.req.rt, cursor.req.namespace.as_deref(), &cursor.req.selectors);
                let added = items.into_iter().map(|o| cursor.req.event_object(&store, o, rv));
                let added: Vec<Value> = added.map(|o| json!({"type": "ADDED", "object": o})).collect();
                cursor.pending.extend(added);
                cursor.rv = rv;
                if cursor.req.send_initial && cursor.req.bookmarks {
                    let b = cursor.req.bookmark(rv, true);
                    cursor.pending.push_back(b);
                }
            }
        }
    }
    let stream = futures::stream::unfold(cursor, next_chunk);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-cache, private")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Produces the next line of the stream, or ends it.
async fn next_chunk(mut c: Cursor) -> Option<(Result<Bytes, std::convert::Infallible>, Cursor)> {
    loop {
        if let Some(ev) = c.pending.pop_front() {
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            return Some((Ok(Bytes::from(line)), c));
        }
        if c.done {
            return None;
        }
        let bookmark_at = if c.req.bookmarks { c.next_bookmark } else { c.deadline };
        tokio::select! {
            () = tokio::time::sleep_until(c.deadline) => return None,
            () = c.shared.shutdown.cancelled() => return None,
            () = tokio::time::sleep_until(bookmark_at), if c.req.bookmarks => {
                let shared = Arc::clone(&c.shared);
                let store = shared.store();
                c.catch_up(&store);
                if !c.done {
                    let b = c.req.bookmark(c.rv, false);
                    c.pending.push_back(b);
                }
                c.next_bookmark = Instant::now() + c.shared.bookmark_interval;
            }
            changed = c.rx.changed() => {
                if changed.is_err() {
                    return None;
                }
                let shared = Arc::clone(&c.shared);
                let store = shared.store();
                c.catch_up(&store);
            }
        }
    }
}
