//! CEL cases for the reader pod's shaping, the readers' ServiceAccount, the assumed role's
//! session name and the HTTP and S3 sinks' secret and encryption settings. Each names the field
//! its rule guards, like the cases in `cel_rules.rs`.

use serde_json::{Value, json};

use super::{Case, spec};

fn reader(v: &mut Value) -> &mut Value {
    &mut spec(v)["reader"]
}

fn http_secrets(v: &mut Value) -> &mut Value {
    &mut spec(v)["sinks"][0]["http"]["secretRefs"]
}

fn many(count: usize, prefix: &str) -> Value {
    Value::Object((0..count).map(|i| (format!("{prefix}{i}"), json!("x"))).collect())
}

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            names: "spec.reader.resources cpu must be a quantity",
            path: "spec.reader.resources.requests.cpu",
            valid: |v| reader(v)["resources"]["requests"]["cpu"] = json!("1.5"),
            invalid: |v| reader(v)["resources"]["requests"]["cpu"] = json!("one"),
        },
        Case {
            names: "spec.reader.resources memory must be a quantity",
            path: "spec.reader.resources.limits.memory",
            valid: |v| reader(v)["resources"]["limits"]["memory"] = json!("1Gi"),
            invalid: |v| reader(v)["resources"]["limits"]["memory"] = json!("1 GB"),
        },
        Case {
            names: "spec.reader.resources ephemeralStorage must be a quantity",
            path: "spec.reader.resources.limits.ephemeralStorage",
            valid: |v| reader(v)["resources"]["limits"]["ephemeralStorage"] = json!("128Mi"),
            invalid: |v| reader(v)["resources"]["limits"]["ephemeralStorage"] = json!("-1Mi"),
        },
        Case {
            names: "spec.reader.priorityClassName must be a PriorityClass name",
            path: "spec.reader.priorityClassName",
            valid: |v| reader(v)["priorityClassName"] = json!("system-cluster-critical"),
            invalid: |v| reader(v)["priorityClassName"] = json!("High_Priority"),
        },
        Case {
            names: "spec.reader.podAnnotations has sluice.dev/ keys",
            path: "spec.reader.podAnnotations",
            valid: |v| reader(v)["podAnnotations"] = many(64, "example.com/a"),
            invalid: |v| reader(v)["podAnnotations"] = json!({"sluice.dev/config-hash": "0"}),
        },
        Case {
            names: "spec.reader.podLabels has one of app.kubernetes.io/name",
            path: "spec.reader.podLabels",
            valid: |v| reader(v)["podLabels"] = json!({"app.kubernetes.io/part-of": "payments"}),
            invalid: |v| reader(v)["podLabels"] = json!({"app.kubernetes.io/instance": "other"}),
        },
        Case {
            names: "spec.reader.env sets a variable the operator or the EKS identity webhook owns",
            path: "spec.reader.env",
            valid: |v| reader(v)["env"] = json!([{"name": "AWS_REGION", "value": "eu-west-1"}]),
            invalid: |v| {
                reader(v)["env"] = json!([{"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::1:role/x"}])
            },
        },
        Case {
            names: "spec.reader.serviceAccount.name is required when create is false",
            path: "spec.reader.serviceAccount.name",
            valid: |v| reader(v)["serviceAccount"] = json!({"create": false, "name": "shared-readers"}),
            invalid: |v| reader(v)["serviceAccount"] = json!({"create": false}),
        },
        Case {
            names: "spec.reader.serviceAccount.annotations apply only to an account the operator creates",
            path: "spec.reader.serviceAccount.annotations",
            valid: |v| reader(v)["serviceAccount"]["annotations"] = json!({}),
            invalid: |v| reader(v)["serviceAccount"]["create"] = json!(false),
        },
        Case {
            names: "spec.reader.serviceAccount.name must be a ServiceAccount name",
            path: "spec.reader.serviceAccount.name",
            valid: |v| reader(v)["serviceAccount"]["name"] = json!("team-a.readers"),
            invalid: |v| reader(v)["serviceAccount"]["name"] = json!("Team_A"),
        },
        Case {
            names: "spec.sinks[].http.headers sets a credential header inline",
            path: "spec.sinks[0].http.headers",
            valid: |v| {
                spec(v)["sinks"][0]["http"]["headers"] = json!({"X-Api-Version": "2", "Accept": "*/*"})
            },
            invalid: |v| spec(v)["sinks"][0]["http"]["headers"]["X-API-KEY"] = json!("s3cr3t"),
        },
        Case {
            names: "spec.credentials.sessionName is only used when source is AssumeRole",
            path: "spec.credentials.sessionName",
            valid: |v| spec(v)["credentials"]["sessionName"] = json!("orders@prod"),
            invalid: |v| spec(v)["credentials"] = json!({"source": "DefaultChain", "sessionName": "x1"}),
        },
        Case {
            names: "spec.credentials.sessionName may hold only letters, digits",
            path: "spec.credentials.sessionName",
            valid: |v| spec(v)["credentials"]["sessionName"] = json!("a+b=c,d.e@f_g-h"),
            invalid: |v| spec(v)["credentials"]["sessionName"] = json!("has space"),
        },
        Case {
            names: "spec.sinks[].http.secretRefs.headers names a header twice",
            path: "spec.sinks[0].http.secretRefs.headers",
            valid: |v| {
                let header =
                    json!({"name": "X-Api-Key", "secretKeyRef": {"name": "web-token", "key": "key"}});
                if let Some(headers) = http_secrets(v)["headers"].as_array_mut() {
                    headers.push(header);
                }
            },
            invalid: |v| {
                let header =
                    json!({"name": "authorization", "secretKeyRef": {"name": "web-token", "key": "key"}});
                if let Some(headers) = http_secrets(v)["headers"].as_array_mut() {
                    headers.push(header);
                }
            },
        },
        Case {
            names: "spec.sinks[].http.secretRefs.headers[].name must be an HTTP header name",
            path: "spec.sinks[0].http.secretRefs.headers[0].name",
            valid: |v| http_secrets(v)["headers"][0]["name"] = json!("X-Api-Key"),
            invalid: |v| http_secrets(v)["headers"][0]["name"] = json!("Bad Header:"),
        },
        Case {
            names: "secretKeyRef.name must be a Secret name",
            path: "spec.sinks[0].http.secretRefs.caBundle.name",
            valid: |v| http_secrets(v)["caBundle"]["name"] = json!("corp-ca.v2"),
            invalid: |v| http_secrets(v)["caBundle"]["name"] = json!("Corp CA"),
        },
        Case {
            names: "secretKeyRef.key must be a Secret key",
            path: "spec.sinks[0].http.secretRefs.headers[0].secretKeyRef.key",
            valid: |v| http_secrets(v)["headers"][0]["secretKeyRef"]["key"] = json!("token_v2.txt"),
            invalid: |v| http_secrets(v)["headers"][0]["secretKeyRef"]["key"] = json!("a/b"),
        },
        Case {
            names: "spec.sinks[].s3.sseKmsKeyId must be a KMS key id",
            path: "spec.sinks[2].s3.sseKmsKeyId",
            valid: |v| {
                spec(v)["sinks"][2]["s3"]["sseKmsKeyId"] =
                    json!("arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
            },
            invalid: |v| spec(v)["sinks"][2]["s3"]["sseKmsKeyId"] = json!("my key"),
        },
    ]
}
