//! The reader pod as the EKS examples shape it: resources and placement copied from the spec,
//! the ServiceAccount created with its IRSA annotation or an existing one used, no variable the
//! EKS pod identity webhook owns, the API token only where coordination needs it, no privileges,
//! Secret keys mounted (never copied into the ConfigMap), and a PodDisruptionBudget.

use super::pod_shape::EKS_WEBHOOK_VARIABLES as WEBHOOK_VARIABLES;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::{Value, json};
use sluice_crds::SqsSource;

use super::*;
use crate::validate::validate;

const ORDERS_HTTP: &str = include_str!("../../../deploy/examples/eks/orders-to-http.yaml");
const PAYMENTS_FIFO: &str = include_str!("../../../deploy/examples/eks/payments-fifo-forward.yaml");
const EVENTS_S3: &str = include_str!("../../../deploy/examples/eks/events-exactly-once-s3-kms.yaml");

fn source(yaml: &str) -> SqsSource {
    let mut source: SqsSource = match serde_yaml::from_str(yaml) {
        Ok(s) => s,
        Err(e) => panic!("example does not parse: {e}"),
    };
    source.metadata.uid = Some("6f1c2a1e-0000-4000-8000-0000000000e1".to_owned());
    source
}

fn children_of(source: &SqsSource) -> Children {
    let valid = match validate(source, Some("ghcr.io/sluice-dev/sluice:0.1.0")) {
        Ok(valid) => valid,
        Err(problems) => panic!("example invalid: {problems:?}"),
    };
    match build(&valid) {
        Ok(children) => children,
        Err(e) => panic!("build failed: {e}"),
    }
}

fn children(yaml: &str) -> Children {
    children_of(&source(yaml))
}

fn pod(children: &Children) -> &PodSpec {
    match children.deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref()) {
        Some(pod) => pod,
        None => panic!("no pod template"),
    }
}

fn reader(children: &Children) -> &Container {
    match pod(children).containers.first() {
        Some(c) => c,
        None => panic!("no reader container"),
    }
}

fn json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

#[test]
fn resources_and_placement_are_copied_from_the_spec() {
    let c = children(PAYMENTS_FIFO);
    let p = json(pod(&c));
    assert_eq!(p["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(
        p["tolerations"],
        json!([{"key": "dedicated", "operator": "Equal", "value": "queue-workers", "effect": "NoSchedule"}])
    );
    assert_eq!(p["priorityClassName"], "payments-high");

    let c = children(ORDERS_HTTP);
    let r = json(reader(&c));
    assert_eq!(
        r["resources"],
        json!({"requests": {"cpu": "250m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}})
    );
    let p = json(pod(&c));
    assert_eq!(p["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        p["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["sluice.dev/source"],
        "orders-to-http"
    );

    let c = children(EVENTS_S3);
    let p = json(pod(&c));
    let term = &p["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["weight"], 100);
    assert_eq!(term["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(json(reader(&c))["resources"]["limits"]["memory"], "512Mi");
}

#[test]
fn a_source_without_resources_gets_the_defaults() {
    let c = children(crate::fixtures::BASIC);
    assert_eq!(
        json(reader(&c))["resources"],
        json!({"requests": {"cpu": "100m", "memory": "48Mi"}, "limits": {"memory": "512Mi"}})
    );
    let mut s = source(PAYMENTS_FIFO);
    s.spec.reader.resources = Some(sluice_crds::ReaderResources {
        requests: None,
        limits: Some(sluice_crds::ResourceAmounts { cpu: Some("2".into()), ..Default::default() }),
    });
    let r = json(reader(&children_of(&s)));
    assert_eq!(
        r["resources"],
        json!({"requests": {"cpu": "100m", "memory": "48Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}})
    );
}

#[test]
fn the_irsa_example_annotates_its_own_account_and_sets_no_webhook_variable() {
    for yaml in [ORDERS_HTTP, EVENTS_S3] {
        let c = children(yaml);
        let account = c.service_account.as_ref().map(json).unwrap_or_default();
        let arn = &account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"];
        assert!(arn.as_str().is_some_and(|a| a.starts_with("arn:aws:iam::123456789012:role/")), "{account}");
        let name = account["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        assert_eq!(pod(&c).service_account_name.as_deref(), Some(name.as_str()));
        assert_eq!(json(&c.role_binding)["subjects"][0]["name"], name.as_str());
        for container in &pod(&c).containers {
            for variable in container.env.iter().flatten() {
                assert!(
                    !WEBHOOK_VARIABLES.contains(&variable.name.as_str()),
                    "{} is the webhook's",
                    variable.name
                );
            }
        }
    }
}

/// The pod template's `sluice.dev/service-account-hash`, if any.
fn account_hash(source: &SqsSource) -> Option<String> {
    let c = children_of(source);
    let annotations = c.deployment.spec.and_then(|d| d.template.metadata).and_then(|m| m.annotations);
    annotations.and_then(|a| a.get(crate::names::SERVICE_ACCOUNT_HASH_ANNOTATION).cloned())
}

#[test]
fn a_changed_irsa_annotation_changes_the_pod_template_and_nothing_else_does() {
    let original = source(ORDERS_HTTP);
    let before = account_hash(&original).expect("the IRSA example's template carries the account hash");
    let mut other_role = original.clone();
    other_role.spec.reader.service_account.annotations.insert(
        "eks.amazonaws.com/role-arn".into(),
        "arn:aws:iam::123456789012:role/orders-reader-v2".into(),
    );
    let after = account_hash(&other_role).expect("still annotated");
    assert_ne!(before, after, "a new role must roll the readers");
    assert_eq!(
        children_of(&original).config_hash,
        children_of(&other_role).config_hash,
        "the config is unchanged"
    );

    let mut same = original.clone();
    same.spec.reader.log_level = Some("debug".into());
    assert_eq!(account_hash(&same).as_deref(), Some(before.as_str()), "only the annotations count");

    let mut none = original.clone();
    none.spec.reader.service_account.annotations.clear();
    assert_eq!(account_hash(&none), None, "no annotations, no hash: removing them rolls the readers too");
    let mut existing = original;
    existing.spec.reader.service_account = sluice_crds::ReaderServiceAccount {
        create: false,
        name: Some("shared".into()),
        ..Default::default()
    };
    assert_eq!(account_hash(&existing), None, "an existing account is the platform team's to roll");
}

#[test]
fn an_assumed_role_reaches_the_reader_in_its_source_not_in_aws_role_arn() {
    let c = children(EVENTS_S3);
    let config = &c.config_map.data.clone().unwrap_or_default()["source.yaml"];
    assert!(config.contains("roleArn: arn:aws:iam::210987654321:role/sluice-events-data"), "{config}");
    assert!(config.contains("sessionName: sluice-events-to-s3"), "{config}");
    assert!(!json(&c.deployment).to_string().contains("AWS_ROLE_ARN"));
}

#[test]
fn an_existing_account_is_used_and_not_written() {
    let c = children(PAYMENTS_FIFO);
    assert!(c.service_account.is_none());
    assert_eq!(pod(&c).service_account_name.as_deref(), Some("payments-readers"));
    assert_eq!(
        json(&c.role_binding)["subjects"],
        json!([{"kind": "ServiceAccount", "name": "payments-readers", "namespace": "payments"}])
    );
}

#[test]
fn every_reader_gets_the_api_token_to_report_its_sinks_health() {
    // At-least-once without a rate limit still writes its own lease ConfigMap (sink health);
    // exactly-once also coordinates there.
    for yaml in [ORDERS_HTTP, PAYMENTS_FIFO, EVENTS_S3] {
        assert_eq!(pod(&children(yaml)).automount_service_account_token, Some(true));
    }
}

#[test]
fn reader_pods_hold_no_privileges() {
    for yaml in [ORDERS_HTTP, PAYMENTS_FIFO, EVENTS_S3, crate::fixtures::BASIC] {
        let c = children(yaml);
        let p = json(pod(&c));
        assert_eq!(p["securityContext"]["runAsNonRoot"], true);
        assert_eq!(p["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        assert!(p["hostNetwork"].is_null() && p["hostPID"].is_null());
        for container in p["containers"].as_array().into_iter().flatten() {
            let sc = &container["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true);
            assert_eq!(sc["allowPrivilegeEscalation"], false);
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
            assert!(sc["capabilities"]["add"].is_null() && sc["privileged"].is_null());
        }
    }
}

#[test]
fn secret_keys_are_mounted_and_never_copied_into_the_config_map() {
    let c = children(ORDERS_HTTP);
    let p = json(pod(&c));
    let volume = p["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == "sink-secrets");
    let volume = volume.cloned().unwrap_or_default();
    assert_eq!(
        volume["projected"]["sources"],
        json!([{"secret": {"name": "orders-webhook-token", "optional": false,
            "items": [{"key": "authorization", "path": "orders-webhook-token/authorization"}]}}])
    );
    let r = json(reader(&c));
    let mount = r["volumeMounts"].as_array().into_iter().flatten().find(|m| m["name"] == "sink-secrets");
    assert_eq!(
        mount.map(|m| (&m["mountPath"], &m["readOnly"])),
        Some((&json!("/var/run/sluice/secrets"), &json!(true)))
    );
    let dir = r["env"].as_array().into_iter().flatten().find(|e| e["name"] == "SLUICE_SECRETS_DIR");
    assert_eq!(dir.map(|e| &e["value"]), Some(&json!("/var/run/sluice/secrets")));

    // The ConfigMap names the Secret and key, and holds no pod shaping (so no env values).
    let config = &c.config_map.data.clone().unwrap_or_default()["source.yaml"];
    assert!(config.contains("name: orders-webhook-token") && config.contains("key: authorization"));
    assert!(!config.contains("Bearer") && !config.contains("topologySpreadConstraints"), "{config}");
    assert!(!config.contains("eks.amazonaws.com/role-arn"), "{config}");

    // No sink referencing a Secret: no volume, no variable.
    let c = children(PAYMENTS_FIFO);
    assert!(!json(&c.deployment).to_string().contains("sink-secrets"));
    assert!(!json(&c.deployment).to_string().contains("SLUICE_SECRETS_DIR"));
}

#[test]
fn user_labels_annotations_and_env_never_override_the_operators() {
    let mut s = source(PAYMENTS_FIFO);
    s.spec.reader.pod_labels.insert("sluice.dev/source".into(), "other".into());
    s.spec.reader.pod_annotations.insert("sluice.dev/config-hash".into(), "forged".into());
    s.spec.reader.env = serde_json::from_value(json!([
        {"name": "POD_NAME", "value": "forged"}, {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
    ]))
    .unwrap_or_default();
    // The CRD and the operator's validation refuse these; the build must hold even so.
    assert!(validate(&s, Some("img")).is_err());
    let valid = crate::validate::Validated {
        source: &s,
        name: "payments-forward".into(),
        namespace: "payments".into(),
        image: "img".into(),
    };
    let c = match build(&valid) {
        Ok(c) => c,
        Err(e) => panic!("build failed: {e}"),
    };
    let template = json(&c.deployment)["spec"]["template"].clone();
    assert_eq!(template["metadata"]["labels"]["sluice.dev/source"], "payments-forward");
    assert_eq!(template["metadata"]["labels"]["team"], "payments");
    assert_eq!(template["metadata"]["annotations"]["sluice.dev/config-hash"], c.config_hash.as_str());
    let env = template["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    let pod_names: Vec<_> = env.iter().filter(|e| e["name"] == "POD_NAME").collect();
    assert_eq!(pod_names.len(), 1);
    assert_eq!(pod_names[0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert!(env.iter().any(|e| e["name"] == "HTTPS_PROXY" && e["value"] == "http://proxy:3128"));
}

#[test]
fn readers_get_a_disruption_budget_over_their_own_pods() {
    for yaml in [ORDERS_HTTP, PAYMENTS_FIFO, EVENTS_S3] {
        let c = children(yaml);
        let pdb = json(&c.disruption_budget);
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        assert_eq!(pdb["spec"]["selector"], json(&c.deployment)["spec"]["selector"]);
        assert_eq!(pdb["metadata"]["ownerReferences"][0]["kind"], "SqsSource");
    }
}
