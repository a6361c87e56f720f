//! Fixtures shared by the validation tests: one valid SqsSource that sets every optional block,
//! and helpers to change one field of it and validate the result.
#![allow(dead_code)] // each test crate uses a different subset

use serde_json::{Value, json};
use sluice_crds::validate::{SpecError, validate_source_value};

pub const LOCALSTACK: &str = "http://127.0.0.1:4566";

pub fn queue_url(name: &str) -> String {
    format!("{LOCALSTACK}/queue/us-east-1/000000000000/{name}")
}

/// A valid source with every optional block present, so every bound and rule has a field to bite.
pub fn full() -> Value {
    json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "SqsSource",
        "metadata": {"name": "full", "namespace": "default"},
        "spec": {
            "queues": [{"url": queue_url("orders"), "endpoint": LOCALSTACK, "region": "us-east-1", "weight": 2}],
            "filter": {"expression": "attributes.kind == 'order' && body.total > 100", "onMismatch": "delete"},
            "replay": {
                "id": "after-incident-42", "ratePerSecond": 50, "deadLetteredAfter": "2026-12-02T13:00:00Z",
                "deadLetteredBefore": "2026-12-02T14:00:00Z", "reasonContains": "HTTP 400"
            },
            "credentials": {
                "source": "AssumeRole",
                "roleArn": "arn:aws:iam::123456789012:role/reader",
                "externalId": "ext-1",
                "sessionName": "sluice-full"
            },
            "receive": {
                "maxMessages": 10, "waitTimeSeconds": 20, "visibilityTimeoutSeconds": 30, "pollers": 4,
                "attributeNames": ["All"], "messageAttributeNames": ["All"],
                "held": {"maxMessages": 1000, "maxBytes": 67108864, "horizonMilliseconds": 2000}
            },
            "rateLimit": {"messagesPerSecond": 100, "bytesPerSecond": 100000, "burstSeconds": 2},
            "delivery": {
                "guarantee": "atLeastOnce", "checkpointIntervalSeconds": 5, "failOnError": false,
                "retry": {
                    "strategy": "fixed", "maxAttempts": 3, "initialDelayMs": 50, "maxDelayMs": 1000,
                    "maxElapsedSeconds": 30, "jitter": false, "retryableStatusCodes": [429, 503]
                }
            },
            "sinks": [
                {
                    "name": "web",
                    "http": {
                        "url": "http://127.0.0.1:8080/events", "timeoutMs": 1000, "concurrency": 8,
                        "headers": {"x-team": "payments"}, "eventType": "com.example.order",
                        "batch": {"maxEvents": 50, "maxBytes": 262144, "maxWaitMilliseconds": 20},
                        "secretRefs": {
                            "headers": [{"name": "Authorization", "secretKeyRef": {"name": "web-token", "key": "header"}}],
                            "caBundle": {"name": "web-ca", "key": "ca.pem"}
                        }
                    },
                    "route": {"attribute": "kind", "values": ["order"]}
                },
                {
                    "name": "forward",
                    "sqs": {"queueUrl": queue_url("copies"), "endpoint": LOCALSTACK, "region": "us-east-1",
                        "offload": {"bucket": "sluice-large", "thresholdBytes": 262144}}
                },
                {
                    "name": "archive",
                    "s3": {
                        "bucket": "sluice-archive", "prefix": "orders/", "endpoint": LOCALSTACK, "region": "us-east-1",
                        "sseKmsKeyId": "alias/sluice-archive",
                        "buffer": {"maxBytes": 8388608, "maxRecords": 1000, "maxSeconds": 30},
                        "compression": "gzip", "keyTemplate": "dt={yyyy}-{MM}-{dd}/hour={HH}", "keyTime": "sentTimestamp"
                    }
                },
                {"name": "debug", "log": {"body": true}}
            ],
            "deadLetterSink": {
                "name": "dead",
                "sqs": {"queueUrl": queue_url("dead"), "endpoint": LOCALSTACK, "region": "us-east-1",
                    "offload": {"bucket": "sluice-large", "thresholdBytes": 262144, "endpoint": LOCALSTACK}}
            },
            "payload": {
                "format": "json", "s3": {"endpoint": LOCALSTACK, "region": "us-east-1"},
                "maxObjectBytes": 1048576, "maxConcurrentFetches": 4, "maxBytesInFlight": 4194304,
                "extendedClient": {"resolve": true}
            },
            "scaling": {
                "minReplicas": 0, "maxReplicas": 5, "targetMessagesPerReplica": 50, "activationThreshold": 1,
                "countInFlight": true, "countDelayed": true, "targetDrainSeconds": 30, "scaleUpMaxStep": 2,
                "scaleDownStabilizationSeconds": 120, "idleCooldownSeconds": 300, "pollIntervalSeconds": 10,
                "activationReadings": 2,
                "fallback": {"failureThreshold": 4, "behavior": "atLeastCurrent", "replicas": 2}
            },
            "reader": {
                "image": "sluice-reader:dev", "logLevel": "debug", "terminationGracePeriodSeconds": 30,
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi", "ephemeralStorage": "16Mi"},
                    "limits": {"cpu": "1", "memory": "256Mi", "ephemeralStorage": "64Mi"}
                },
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "sluice", "effect": "NoSchedule"}],
                "affinity": full_affinity(),
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": selector(),
                    "matchLabelKeys": ["pod-template-hash"], "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"
                }],
                "priorityClassName": "sluice-readers",
                "podAnnotations": {"example.com/team": "payments"},
                "podLabels": {"team": "payments"},
                "imagePullSecrets": [{"name": "registry"}],
                "env": [
                    {"name": "AWS_REGION", "value": "us-east-1"},
                    {"name": "FROM_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "extra", "key": "a"}}},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "extra", "key": "b"}}},
                    {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "FROM_RESOURCE", "valueFrom": {"resourceFieldRef": {"containerName": "reader", "resource": "limits.memory"}}}
                ],
                "envFrom": [
                    {"configMapRef": {"name": "reader-extra", "optional": true}, "prefix": "EXTRA_"},
                    {"secretRef": {"name": "reader-secret"}}
                ],
                "serviceAccount": {
                    "create": true, "name": "full-readers",
                    "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/full-reader"}
                }
            }
        },
        "status": {
            "observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "desiredReplicas": 1,
            "currentEpoch": 2, "committedEpoch": 1,
            "readers": [{
                "pod": "full-reader-0", "heldMessages": 12, "heldBytes": 1200, "boundMessages": 40,
                "boundBytes": 67108864, "handedOff": 100, "waitMeanMilliseconds": 20, "waitMaxMilliseconds": 90
            }],
            "held": {"messages": 12, "bytes": 1200, "maxMessagesPerReader": 12},
            "fallback": {
                "behavior": "atLeastCurrent", "replicas": 2, "consecutiveFailures": 4,
                "since": "2026-01-01T00:00:00Z", "lastError": "queue orders: connection refused"
            },
            "replay": {
                "id": "after-incident-42", "phase": "Running", "replayed": 20, "skipped": 1, "uncertain": 0,
                "batch": {"stage": "sent", "ids": ["m-1"], "receipts": ["h-1"]}
            },
            "queueRedrive": [{
                "queue": "http://127.0.0.1:4566/queue/us-east-1/000000000000/orders",
                "maxReceiveCount": 5, "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:orders-dlq"
            }],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Reconciled", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]
        }
    })
}

/// A label selector with both its parts, as affinity terms and spread constraints take it.
fn selector() -> Value {
    json!({
        "matchLabels": {"sluice.dev/source": "full"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["readers"]}]
    })
}

/// A pod (anti-)affinity term with every field.
fn pod_term() -> Value {
    json!({
        "labelSelector": selector(), "namespaceSelector": selector(), "namespaces": ["default"],
        "topologyKey": "kubernetes.io/hostname", "matchLabelKeys": ["pod-template-hash"],
        "mismatchLabelKeys": ["team"]
    })
}

/// Node, pod and anti-affinity with every list filled, so each bound has a place to bite.
fn full_affinity() -> Value {
    let node_term = json!({
        "matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}],
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]
    });
    let pod_terms = json!({
        "requiredDuringSchedulingIgnoredDuringExecution": [pod_term()],
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": pod_term()}]
    });
    json!({
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [node_term.clone()]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": node_term}]
        },
        "podAffinity": pod_terms.clone(),
        "podAntiAffinity": pod_terms
    })
}

/// `full()` with credentials from a Secret, so the `secretRef` fields exist.
pub fn full_with_secret() -> Value {
    let mut v = full();
    v["spec"]["credentials"] = json!({
        "source": "Secret",
        "secretRef": {
            "name": "aws", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret", "sessionTokenKey": "token"
        }
    });
    v
}

/// Validates and returns the error, panicking if the object was accepted.
pub fn rejected(v: &Value) -> SpecError {
    match validate_source_value(v) {
        Ok(_) => panic!(
            "expected a rejection of:\n{}",
            serde_json::to_string_pretty(&v["spec"]).unwrap_or_default()
        ),
        Err(e) => e,
    }
}

/// Validates, panicking with the violations if the object was rejected.
pub fn accepted(v: &Value) {
    if let Err(e) = validate_source_value(v) {
        panic!("expected acceptance, got:\n{e}");
    }
}

/// Sets the field at a dotted path (`spec.sinks[].http.timeoutMs`); `[]` selects the first entry
/// of the list in which the rest of the path's parent exists. Returns the concrete path set
/// (`spec.sinks[0].http.timeoutMs`), or `None` if no parent exists.
pub fn set_path(value: &mut Value, path: &str, new: Value) -> Option<String> {
    let segments: Vec<&str> = path.split('.').collect();
    set_segments(value, &segments, new, String::new())
}

fn set_segments(value: &mut Value, segments: &[&str], new: Value, done: String) -> Option<String> {
    let (first, rest) = segments.split_first()?;
    let (key, each) = match first.strip_suffix("[]") {
        Some(key) => (key, true),
        None => (*first, false),
    };
    let here = if done.is_empty() { key.to_owned() } else { format!("{done}.{key}") };
    let obj = value.as_object_mut()?;
    if rest.is_empty() && !each {
        obj.insert(key.to_owned(), new);
        return Some(here);
    }
    let child = obj.get_mut(key)?;
    if !each {
        return set_segments(child, rest, new, here);
    }
    let items = child.as_array_mut()?;
    if rest.is_empty() {
        return None;
    }
    for (i, item) in items.iter_mut().enumerate() {
        let mut probe = item.clone();
        if let Some(p) = set_segments(&mut probe, rest, new.clone(), format!("{here}[{i}]")) {
            *item = probe;
            return Some(p);
        }
    }
    None
}

/// Reads the field at a dotted path, with `[]` as in [`set_path`].
pub fn get_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let segments: Vec<&str> = path.split('.').collect();
    get_segments(value, &segments)
}

fn get_segments<'a>(value: &'a Value, segments: &[&str]) -> Option<&'a Value> {
    let Some((first, rest)) = segments.split_first() else { return Some(value) };
    match first.strip_suffix("[]") {
        Some(key) => value.get(key)?.as_array()?.iter().find_map(|item| get_segments(item, rest)),
        None => get_segments(value.get(*first)?, rest),
    }
}
