//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) of the kinds kubectl's
//! imperative commands create, turned into the JSON the rest of the server handles.
//!
//! Why: kubectl sends built-in kinds as protobuf on `create` (`kubectl create configmap`,
//! `kubectl create token`) and does not fall back to JSON when a server answers 415 (client-go
//! falls back only from CBOR). Carrying every Kubernetes message would mean the whole generated
//! API; the few messages those commands send are declared here with `prost`, field numbers as in
//! Kubernetes' `generated.proto`. Of `ObjectMeta` only what a create carries is read (name,
//! generateName, namespace, labels, annotations, finalizers). Any other kind is refused with a
//! 415 that names it and says to send JSON (`kubectl apply`, `kubectl create -f`).
//!
//! The envelope: the 4 bytes `k8s\0`, then a `runtime.Unknown` whose `typeMeta` names the kind
//! and whose `raw` holds the object's own message.

use std::collections::BTreeMap;

use prost::Message;
use serde_json::{Value, json};

use crate::controlplane::error::ApiError;

const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct TokenRequest {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<TokenRequestSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct TokenRequestSpec {
    #[prost(string, repeated, tag = "1")]
    audiences: Vec<String>,
    #[prost(message, optional, tag = "3")]
    bound_object_ref: Option<BoundObjectReference>,
    #[prost(int64, optional, tag = "4")]
    expiration_seconds: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct BoundObjectReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
}

/// The JSON body a protobuf body stands for, or a 415 naming what cannot be read.
pub fn to_json(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let refuse = |what: String| {
        ApiError::unsupported_media_type(&format!(
            "application/vnd.kubernetes.protobuf ({what}; this server reads protobuf only for ConfigMap and TokenRequest: send JSON, e.g. kubectl apply -f)"
        ))
    };
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| refuse("no k8s protobuf envelope".into()))?;
    let unknown = Unknown::decode(envelope).map_err(|e| refuse(format!("undecodable envelope: {e}")))?;
    if unknown.content_encoding.as_deref().is_some_and(|e| !e.is_empty()) {
        return Err(refuse("an encoded body".into()));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let undecodable = |e: prost::DecodeError| refuse(format!("undecodable {kind}: {e}"));
    let object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(ConfigMap::decode(raw.as_slice()).map_err(undecodable)?),
        ("authentication.k8s.io/v1", "TokenRequest") => {
            token_request(TokenRequest::decode(raw.as_slice()).map_err(undecodable)?)
        }
        _ => return Err(refuse(format!("kind {api_version}/{kind}"))),
    };
    let mut object = object;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    serde_json::to_vec(&object).map_err(|e| refuse(e.to_string()))
}

fn metadata(meta: Option<ObjectMeta>) -> Value {
    let meta = meta.unwrap_or_default();
    let mut out = json!({});
    let fields = [("name", meta.name), ("generateName", meta.generate_name), ("namespace", meta.namespace)];
    for (key, value) in fields {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            out[key] = json!(value);
        }
    }
    if !meta.labels.is_empty() {
        out["labels"] = json!(meta.labels);
    }
    if !meta.annotations.is_empty() {
        out["annotations"] = json!(meta.annotations);
    }
    if !meta.finalizers.is_empty() {
        out["finalizers"] = json!(meta.finalizers);
    }
    out
}

fn config_map(cm: ConfigMap) -> Value {
    let mut out = json!({"metadata": metadata(cm.metadata)});
    if !cm.data.is_empty() {
        out["data"] = json!(cm.data);
    }
    if !cm.binary_data.is_empty() {
        let encoded: BTreeMap<String, k8s_openapi::ByteString> =
            cm.binary_data.into_iter().map(|(k, v)| (k, k8s_openapi::ByteString(v))).collect();
        out["binaryData"] = json!(encoded);
    }
    if let Some(immutable) = cm.immutable {
        out["immutable"] = json!(immutable);
    }
    out
}

fn token_request(tr: TokenRequest) -> Value {
    let spec = tr.spec.unwrap_or_default();
    let mut out = json!({"metadata": metadata(tr.metadata), "spec": {"audiences": spec.audiences}});
    if let Some(seconds) = spec.expiration_seconds {
        out["spec"]["expirationSeconds"] = json!(seconds);
    }
    if let Some(bound) = spec.bound_object_ref {
        let mut r = json!({});
        let fields = [
            ("kind", bound.kind),
            ("apiVersion", bound.api_version),
            ("name", bound.name),
            ("uid", bound.uid),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                r[key] = json!(value);
            }
        }
        out["spec"]["boundObjectRef"] = r;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
        };
        [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
    }

    fn meta(name: &str) -> Option<ObjectMeta> {
        Some(ObjectMeta { name: Some(name.into()), namespace: Some("shop".into()), ..ObjectMeta::default() })
    }

    #[test]
    fn a_config_map_becomes_its_json() {
        let cm = ConfigMap {
            metadata: meta("settings"),
            data: BTreeMap::from([("a".into(), "1".into()), ("empty".into(), String::new())]),
            binary_data: BTreeMap::from([("b".into(), vec![0, 1, 2])]),
            immutable: None,
        };
        let body = to_json(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "shop"},
                "data": {"a": "1", "empty": ""}, "binaryData": {"b": "AAEC"}})
        );
    }

    #[test]
    fn a_token_request_becomes_its_json() {
        let tr = TokenRequest {
            metadata: meta("reader"),
            spec: Some(TokenRequestSpec {
                audiences: vec!["api".into()],
                bound_object_ref: None,
                expiration_seconds: Some(600),
            }),
        };
        let body =
            to_json(&envelope("authentication.k8s.io/v1", "TokenRequest", tr.encode_to_vec())).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["spec"], json!({"audiences": ["api"], "expirationSeconds": 600}));
        assert_eq!(v["kind"], "TokenRequest");
    }

    #[test]
    fn other_kinds_and_bodies_are_refused_with_a_415() {
        let err = to_json(&envelope("apps/v1", "Deployment", vec![])).unwrap_err();
        assert_eq!(err.code, 415);
        assert!(
            err.message.contains("apps/v1/Deployment") && err.message.contains("send JSON"),
            "{}",
            err.message
        );
        assert_eq!(to_json(b"{}").unwrap_err().code, 415);
    }
}
