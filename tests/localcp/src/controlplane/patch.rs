//! The patch flavours the API accepts, applied to JSON values.
//!
//! Merge patch (RFC 7386) and JSON patch (RFC 6902) are exact, via the `json-patch` crate, but for one
//! rule of the API server's JSON patch library that clients rely on: a `test` for `null` passes on a
//! path that does not exist (kube-runtime's finalizer helper adds the first finalizer with
//! `test /metadata/finalizers null` then `add`). Strategic merge
//! is approximated: maps merge like a merge patch, lists whose elements all carry a `name` (containers,
//! env, volumes, ports) merge element-wise by name, and every other list is replaced. The real thing reads
//! per-field `patchMergeKey`/`patchStrategy` tags from the Go types and honours `$patch`/`$retainKeys`
//! directives; none of that is reproduced. Server-side apply lives in the store (it needs ownership).

use serde_json::Value;

use super::error::{ApiError, Result};

/// A patch request's flavour, from its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json` (approximated, see the module doc).
    StrategicMerge,
    /// `application/json-patch+json`.
    Json,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply {
        /// `fieldManager` query parameter (required).
        manager: String,
        /// `force` query parameter: take fields owned by other managers.
        force: bool,
    },
}

impl PatchKind {
    /// Picks the flavour from a content type; apply needs its field manager.
    pub fn from_content_type(content_type: &str, manager: Option<&str>, force: bool) -> Result<Self> {
        let ct = content_type.split(';').next().unwrap_or("").trim();
        match ct {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::StrategicMerge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => match manager {
                Some(m) if !m.is_empty() => Ok(Self::Apply { manager: m.to_owned(), force }),
                _ => Err(ApiError::bad_request("fieldManager is required for apply requests")),
            },
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// Applies a non-apply patch to `target`.
pub fn apply_patch(kind: &PatchKind, target: &mut Value, patch: &Value) -> Result<()> {
    match kind {
        PatchKind::Merge => {
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchKind::StrategicMerge => {
            strategic_merge(target, patch);
            Ok(())
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            // A missing path tests equal to null, as in the API server (see the module doc).
            let ops: Vec<_> = ops
                .0
                .into_iter()
                .filter(|op| match op {
                    json_patch::PatchOperation::Test(t) => {
                        !(t.value.is_null() && target.pointer(t.path.as_str()).is_none())
                    }
                    _ => true,
                })
                .collect();
            json_patch::patch(target, &ops).map_err(|e| ApiError::invalid_patch(&e.to_string()))
        }
        PatchKind::Apply { .. } => Err(ApiError::bad_request("apply is handled by the store")),
    }
}

/// Merge semantics with name-keyed list merging (see the module doc).
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    t.remove(k);
                } else {
                    strategic_merge(t.entry(k.clone()).or_insert(Value::Null), pv);
                }
            }
        }
        (Value::Array(t), Value::Array(p)) if all_named(t) && all_named(p) => {
            for pe in p {
                match t.iter_mut().find(|te| te.get("name") == pe.get("name")) {
                    Some(te) => strategic_merge(te, pe),
                    None => t.push(pe.clone()),
                }
            }
        }
        (t, p) => {
            let mut fresh = Value::Null;
            json_patch::merge(&mut fresh, p);
            *t = fresh;
        }
    }
}

fn all_named(list: &[Value]) -> bool {
    !list.is_empty() && list.iter().all(|e| e.get("name").is_some_and(Value::is_string))
}

/// Deep-merges an apply configuration: maps merge, everything else (lists included) replaces.
pub fn merge_apply(target: &mut Value, config: &Value) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, cv) in c {
                if cv.is_null() {
                    t.remove(k);
                } else {
                    merge_apply(t.entry(k.clone()).or_insert(Value::Null), cv);
                }
            }
        }
        (t, c) => *t = c.clone(),
    }
}

impl ApiError {
    /// 422 for a JSON patch whose `test` failed or whose path is missing.
    pub fn invalid_patch(message: &str) -> Self {
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("the patch could not be applied: {message}"),
            causes: Vec::new(),
            subject: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_map_to_kinds() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json", None, false).unwrap(),
            PatchKind::Merge
        );
        let apply = PatchKind::from_content_type("application/apply-patch+yaml", Some("m"), true).unwrap();
        assert_eq!(apply, PatchKind::Apply { manager: "m".into(), force: true });
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml", None, false).unwrap_err().code,
            400
        );
        assert_eq!(PatchKind::from_content_type("text/plain", None, false).unwrap_err().code, 415);
    }

    #[test]
    fn merge_and_json_patches() {
        let mut o = json!({"spec": {"a": 1, "b": [1, 2]}, "metadata": {"labels": {"x": "1"}}});
        apply_patch(&PatchKind::Merge, &mut o, &json!({"spec": {"a": null, "b": [3]}})).unwrap();
        assert_eq!(o["spec"], json!({"b": [3]}));
        let ops = json!([{"op": "add", "path": "/spec/c", "value": 5}, {"op": "test", "path": "/spec/c", "value": 5}]);
        apply_patch(&PatchKind::Json, &mut o, &ops).unwrap();
        assert_eq!(o["spec"]["c"], 5);
        let absent_is_null = json!([{"op": "test", "path": "/spec/none", "value": null}, {"op": "add", "path": "/spec/none", "value": [1]}]);
        apply_patch(&PatchKind::Json, &mut o, &absent_is_null).unwrap();
        assert_eq!(o["spec"]["none"], json!([1]));
        let failing = json!([{"op": "test", "path": "/spec/c", "value": 6}]);
        assert_eq!(apply_patch(&PatchKind::Json, &mut o, &failing).unwrap_err().code, 422);
    }

    #[test]
    fn strategic_merge_merges_named_lists() {
        let mut o = json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}],
                           "args": ["1", "2"]});
        strategic_merge(
            &mut o,
            &json!({"containers": [{"name": "a", "image": "y"}, {"name": "b"}], "args": ["3"]}),
        );
        assert_eq!(o["containers"][0]["image"], "y");
        assert_eq!(o["containers"][0]["env"][0]["value"], "1");
        assert_eq!(o["containers"][1]["name"], "b");
        assert_eq!(o["args"], json!(["3"]));
    }

    #[test]
    fn apply_merge_replaces_lists_and_deletes_nulls() {
        let mut o = json!({"spec": {"a": 1, "l": [1], "m": {"k": 1}}});
        merge_apply(&mut o, &json!({"spec": {"l": [2], "m": {"j": 2}, "a": null}}));
        assert_eq!(o, json!({"spec": {"l": [2], "m": {"k": 1, "j": 2}}}));
    }
}
