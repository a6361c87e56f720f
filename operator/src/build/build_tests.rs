use k8s_openapi::api::core::v1::{Container, EnvVar};
use sluice_crds::SqsSource;

use super::*;
use crate::fixtures;
use crate::validate::validate;

fn children(yaml: &str) -> Children {
    let source = fixtures::source(yaml);
    let valid = match validate(&source, Some("ghcr.io/sluice/sluice:0.1.0")) {
        Ok(valid) => valid,
        Err(problems) => panic!("fixture invalid: {problems:?}"),
    };
    match build(&valid) {
        Ok(children) => children,
        Err(e) => panic!("build failed: {e}"),
    }
}

fn reader(children: &Children) -> &Container {
    let pod = children.deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    match pod.and_then(|p| p.containers.first()) {
        Some(c) => c,
        None => panic!("no reader container"),
    }
}

fn env<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.iter().flatten().find(|e| e.name == name)
}

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

#[test]
fn every_child_is_named_labelled_and_owned_by_the_source() {
    let c = children(fixtures::BASIC);
    let metas = [
        (&c.config_map.metadata, "orders-config"),
        (&c.service_account.as_ref().map(|a| a.metadata.clone()).unwrap_or_default(), "orders-reader"),
        (&c.role_binding.metadata, "orders-sluice-reader"),
        (&c.deployment.metadata, "orders-reader"),
        (&c.disruption_budget.metadata, "orders-reader"),
    ];
    for (meta, name) in metas {
        assert_eq!(meta.name.as_deref(), Some(name));
        assert_eq!(meta.namespace.as_deref(), Some("shop"));
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels["app.kubernetes.io/name"], "sluice-reader");
        assert_eq!(labels["app.kubernetes.io/instance"], "orders");
        assert_eq!(labels["sluice.dev/source"], "orders");
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{name}");
        assert_eq!(owners[0].kind, "SqsSource");
        assert_eq!(owners[0].name, "orders");
        assert_eq!(owners[0].uid, "6f1c2a1e-0000-4000-8000-000000000001");
        assert_eq!(owners[0].controller, Some(true));
    }
}

#[test]
fn the_deployment_never_sets_replicas_so_the_autoscaler_owns_them() {
    for yaml in [fixtures::BASIC, fixtures::EXACTLY_ONCE_SECRET, fixtures::ASSUME_ROLE] {
        let d = json(&children(yaml).deployment);
        assert!(d["spec"].get("replicas").is_none(), "{d}");
    }
}

#[test]
fn the_reader_runs_in_kubernetes_mode_with_the_mounted_source() {
    let c = children(fixtures::BASIC);
    let r = reader(&c);
    assert_eq!(r.name, "reader");
    assert_eq!(r.image.as_deref(), Some("ghcr.io/sluice/sluice:0.1.0"));
    assert_eq!(r.command, Some(vec!["sluice-reader".to_owned()]));
    let args = r.args.clone().unwrap_or_default().join(" ");
    assert!(
        args.starts_with("--source /etc/sluice/source.yaml --coordination kubernetes --admin-addr [::]:9090")
    );
    assert!(args.contains("--shutdown-deadline-seconds 25"), "{args}");
    assert!(args.contains("--unready-after-seconds 60"), "the default: {args}");
    let d = json(&c.deployment);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 35);
    assert_eq!(pod["serviceAccountName"], "orders-reader");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "orders-config");
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/etc/sluice");
    assert_eq!(pod["containers"][0]["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(pod["containers"][0]["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        d["spec"]["selector"]["matchLabels"],
        serde_json::json!({
            "app.kubernetes.io/name": "sluice-reader",
            "app.kubernetes.io/instance": "orders",
            "sluice.dev/source": "orders",
        })
    );
}

#[test]
fn pod_identity_comes_from_the_downward_api() {
    let c = children(fixtures::BASIC);
    let r = reader(&c);
    let pod_name = json(&env(r, "POD_NAME"));
    assert_eq!(pod_name["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    let pod_ns = json(&env(r, "POD_NAMESPACE"));
    assert_eq!(pod_ns["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(env(r, "SLUICE_SOURCE").and_then(|e| e.value.as_deref()), Some("orders"));
    assert_eq!(env(r, "RUST_LOG").and_then(|e| e.value.as_deref()), Some("info"));
    assert!(env(r, "AWS_ACCESS_KEY_ID").is_none());
    assert!(env(r, "AWS_ROLE_ARN").is_none());
}

#[test]
fn secret_credentials_are_referenced_never_copied() {
    let c = children(fixtures::EXACTLY_ONCE_SECRET);
    let r = reader(&c);
    let key = json(&env(r, "AWS_ACCESS_KEY_ID"));
    assert_eq!(
        key["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "aws-keys", "key": "AWS_ACCESS_KEY_ID"})
    );
    let secret = json(&env(r, "AWS_SECRET_ACCESS_KEY"));
    assert_eq!(secret["valueFrom"]["secretKeyRef"]["key"], "AWS_SECRET_ACCESS_KEY");
    let token = json(&env(r, "AWS_SESSION_TOKEN"));
    assert_eq!(token["valueFrom"]["secretKeyRef"]["key"], "TOKEN");
    assert!(token["valueFrom"]["secretKeyRef"].get("optional").is_none());
    assert_eq!(env(r, "RUST_LOG").and_then(|e| e.value.as_deref()), Some("debug,aws_config=warn"));
    assert_eq!(r.image.as_deref(), Some("registry.example/sluice:1.2.3"));
    let args = r.args.clone().unwrap_or_default().join(" ");
    assert!(args.contains("--shutdown-deadline-seconds 40"), "{args}");
    assert!(args.contains("--unready-after-seconds 15"), "spec.delivery.unreadyAfterSeconds: {args}");
}

#[test]
fn assume_role_leaves_aws_role_arn_to_the_identity_webhook() {
    let c = children(fixtures::ASSUME_ROLE);
    let r = reader(&c);
    assert!(env(r, "AWS_ROLE_ARN").is_none());
    assert!(env(r, "AWS_ACCESS_KEY_ID").is_none());
    assert_eq!(json(&c.deployment)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 90);
}

#[test]
fn the_config_map_holds_the_source_and_nothing_else() {
    let c = children(fixtures::EXACTLY_ONCE_SECRET);
    let data = c.config_map.data.clone().unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), vec!["source.yaml"]);
    let rendered: SqsSource = match serde_yaml::from_str(&data["source.yaml"]) {
        Ok(s) => s,
        Err(e) => panic!("rendered source does not parse: {e}"),
    };
    let original = fixtures::source(fixtures::EXACTLY_ONCE_SECRET);
    assert_eq!(rendered.spec, original.spec);
    assert_eq!(rendered.metadata.name.as_deref(), Some("payments"));
    assert_eq!(rendered.metadata.namespace.as_deref(), Some("shop"));
    assert!(rendered.metadata.uid.is_none() && rendered.metadata.generation.is_none());
    assert!(rendered.status.is_none());
    let text = &data["source.yaml"];
    assert!(text.contains("name: aws-keys") && !text.contains("status"));
}

#[test]
fn the_pod_template_carries_the_config_hash() {
    let c = children(fixtures::BASIC);
    let d = json(&c.deployment);
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["sluice.dev/config-hash"],
        c.config_hash.as_str()
    );
    assert_eq!(c.config_hash.len(), 16);
}

#[test]
fn a_spec_change_changes_the_hash_and_metadata_churn_does_not() {
    let base = children(fixtures::BASIC).config_hash;

    let mut relabelled = fixtures::source(fixtures::BASIC);
    relabelled.metadata.generation = Some(7);
    relabelled.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
    let valid = validate(&relabelled, Some("ghcr.io/sluice/sluice:0.1.0"));
    let same = valid.map(|v| build(&v).map(|c| c.config_hash));
    assert!(matches!(same, Ok(Ok(ref h)) if *h == base));

    // Scaling is the autoscaler's business: new bounds do not restart the readers.
    let mut rescaled = fixtures::source(fixtures::BASIC);
    rescaled.spec.scaling.max_replicas += 3;
    rescaled.spec.scaling.target_messages_per_replica += 7;
    let valid = validate(&rescaled, Some("ghcr.io/sluice/sluice:0.1.0"));
    let same = valid.map(|v| build(&v).map(|c| c.config_hash));
    assert!(matches!(same, Ok(Ok(ref h)) if *h == base));

    let mut changed = fixtures::source(fixtures::BASIC);
    changed.spec.receive.max_messages = 5;
    let valid = validate(&changed, Some("ghcr.io/sluice/sluice:0.1.0"));
    let other = valid.map(|v| build(&v).map(|c| c.config_hash));
    assert!(matches!(other, Ok(Ok(ref h)) if *h != base));
}

#[test]
fn the_role_binding_binds_the_readers_account_to_the_shared_reader_cluster_role() {
    let c = children(fixtures::BASIC);
    let rb = json(&c.role_binding);
    assert_eq!(
        rb["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sluice-reader"})
    );
    assert_eq!(
        rb["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "orders-reader", "namespace": "shop"}])
    );
}

#[test]
fn a_source_without_uid_cannot_own_children() {
    let mut source = fixtures::source(fixtures::BASIC);
    source.metadata.uid = None;
    let result = validate(&source, Some("img")).map(|v| build(&v).map(|c| c.config_hash));
    assert!(matches!(result, Ok(Err(crate::error::Error::Build(_)))));
}
