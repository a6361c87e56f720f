//! Every manifest a user is told to apply, rendered as they would render it: the kustomize base,
//! the EKS overlay (new image and namespace), the monitoring objects, and each example SqsSource
//! through the operator's own build. Asserts what an EKS install depends on: readers follow the
//! overlay's image, no secret sits in any ConfigMap, IRSA examples carry the ServiceAccount
//! annotation and none of the webhook's variables, resources and placement reach the pod, and
//! both the operator and the readers have PodDisruptionBudgets.
//!
//! Needs `kubectl` (1.27+, kustomize 5) on PATH, as a user installing Sluice does.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sluice_crds::SqsSource;
use sluice_operator::build::pod_shape::EKS_WEBHOOK_VARIABLES as WEBHOOK_VARIABLES;

/// The image the bases name, and the one the EKS overlay swaps in.
const BASE_IMAGE: &str = "ghcr.io/sluice-dev/sluice:0.1.0";
const OVERLAY_IMAGE: &str = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/sluice:0.1.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `kubectl kustomize DIR`, one JSON value per document.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo().join(dir))
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubectl (install kubectl 1.27+ with kustomize 5): {e}"));
    assert!(out.status.success(), "kubectl kustomize {dir} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{dir}: bad YAML: {e}")))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

fn operator_container(docs: &[Value]) -> &Value {
    &find(docs, "Deployment", "sluice-operator")["spec"]["template"]["spec"]["containers"][0]
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

/// ConfigMaps may hold settings, never credentials: every key is checked against the
/// configuration keys the project writes, and no value looks like a credential.
fn assert_no_secret_in_config_maps(docs: &[Value]) {
    for cm in docs.iter().filter(|d| d["kind"] == "ConfigMap") {
        for (key, value) in cm["data"].as_object().into_iter().flatten() {
            let text = value.as_str().unwrap_or_default();
            assert!(
                [
                    "RUST_LOG",
                    "SLUICE_NAMESPACE",
                    "SLUICE_RECONCILES_AT_ONCE",
                    "SLUICE_SCALER_INTERVALS_AT_ONCE",
                    "source.yaml"
                ]
                .contains(&key.as_str()),
                "ConfigMap {} has an unexpected key {key}",
                cm["metadata"]["name"]
            );
            for needle in ["AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "Bearer ", "password", "BEGIN "]
            {
                assert!(
                    !text.contains(needle),
                    "ConfigMap {} key {key} holds {needle:?}",
                    cm["metadata"]["name"]
                );
            }
        }
    }
}

#[test]
fn the_base_runs_readers_on_the_operators_image_with_a_budget_and_a_service() {
    let docs = kustomize("deploy/kustomize");
    let operator = operator_container(&docs);
    assert_eq!(operator["image"], BASE_IMAGE);
    assert_eq!(env_value(operator, "SLUICE_READER_IMAGE"), Some(BASE_IMAGE));
    let pdb = find(&docs, "PodDisruptionBudget", "sluice-operator");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "sluice-operator");
    let service = find(&docs, "Service", "sluice-operator");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "admin");
    let rules = find(&docs, "ClusterRole", "sluice-operator")["rules"].to_string();
    assert!(rules.contains("poddisruptionbudgets") && !rules.contains("secrets"), "{rules}");
    assert_no_secret_in_config_maps(&docs);
}

#[test]
fn the_eks_overlay_moves_the_readers_image_and_the_namespace_with_the_operator() {
    let docs = kustomize("deploy/overlays/eks");
    let operator = operator_container(&docs);
    assert_eq!(operator["image"], OVERLAY_IMAGE);
    assert_eq!(
        env_value(operator, "SLUICE_READER_IMAGE"),
        Some(OVERLAY_IMAGE),
        "readers must follow the overlay"
    );
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ];
        let want = if cluster_scoped.contains(&kind) { Value::Null } else { json!("sluice") };
        assert_eq!(doc["metadata"]["namespace"], want, "{kind} {}", doc["metadata"]["name"]);
    }
    let binding = find(&docs, "ClusterRoleBinding", "sluice-operator");
    assert_eq!(binding["subjects"][0]["namespace"], "sluice");
    let account = find(&docs, "ServiceAccount", "sluice-operator");
    assert_eq!(
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/sluice-operator"
    );
    assert!(find(&docs, "PodDisruptionBudget", "sluice-operator").is_object());
    assert_no_secret_in_config_maps(&docs);
}

#[test]
fn the_monitoring_objects_select_the_operator_and_every_reader() {
    let docs = kustomize("deploy/monitoring");
    let monitor = find(&docs, "ServiceMonitor", "sluice-operator");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "admin");
    let readers = find(&docs, "PodMonitor", "sluice-readers");
    assert_eq!(readers["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "sluice-reader");
    assert_eq!(readers["spec"]["namespaceSelector"]["any"], true);
}

/// Every example SqsSource, as the operator would build it with the overlay's reader image.
fn examples() -> Vec<(String, SqsSource)> {
    let mut found = Vec::new();
    for dir in ["deploy/examples", "deploy/examples/eks"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect("examples directory") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable example");
            let mut source = sluice_crds::validate::parse_source_yaml(&text)
                .unwrap_or_else(|e| panic!("{} is invalid:\n{e}", path.display()));
            source.metadata.uid = Some("6f1c2a1e-0000-4000-8000-0000000000f1".to_owned());
            source.metadata.namespace.get_or_insert_with(|| "default".to_owned());
            found.push((path.display().to_string(), source));
        }
    }
    assert!(found.len() >= 6, "expected the three local and three EKS examples, found {}", found.len());
    found
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("serializes")
}

#[test]
fn every_example_builds_readers_with_budgets_resources_and_no_secret_in_their_config() {
    for (path, source) in examples() {
        let valid = sluice_operator::validate::validate(&source, Some(OVERLAY_IMAGE))
            .unwrap_or_else(|p| panic!("{path}: {p:?}"));
        let children = sluice_operator::build::build(&valid).unwrap_or_else(|e| panic!("{path}: {e}"));
        let deployment = to_json(&children.deployment);
        let pod = &deployment["spec"]["template"]["spec"];
        let reader = &pod["containers"][0];
        if source.spec.reader.image.is_none() {
            assert_eq!(reader["image"], OVERLAY_IMAGE, "{path}");
        }
        assert!(reader["resources"]["requests"]["memory"].is_string(), "{path}: no memory request");
        assert!(reader["resources"]["limits"]["memory"].is_string(), "{path}: no memory limit");
        assert_eq!(
            to_json(&children.disruption_budget)["spec"]["selector"],
            deployment["spec"]["selector"],
            "{path}"
        );
        assert_no_secret_in_config_maps(&[to_json(&children.config_map)]);

        // Pod shaping from the spec reaches the pod as written.
        let shaping = to_json(&source.spec.reader);
        for (field, pod_field) in [
            ("nodeSelector", "nodeSelector"),
            ("tolerations", "tolerations"),
            ("affinity", "affinity"),
            ("topologySpreadConstraints", "topologySpreadConstraints"),
            ("priorityClassName", "priorityClassName"),
        ] {
            if !shaping[field].is_null() {
                assert_eq!(pod[pod_field], shaping[field], "{path}: {field}");
            }
        }
        if let Some(requests) = shaping["resources"]["requests"].as_object() {
            for (name, amount) in requests {
                assert_eq!(reader["resources"]["requests"][name], *amount, "{path}: requests.{name}");
            }
        }

        // IRSA: the annotation sits on the account the pods run as; the pod sets no variable
        // the webhook owns, so the webhook can inject its own.
        if let Some(account) = &children.service_account {
            assert_eq!(pod["serviceAccountName"], to_json(&account.metadata.name), "{path}");
            let annotations = to_json(&account.metadata.annotations);
            let wanted = &shaping["serviceAccount"]["annotations"];
            if wanted.as_object().is_some_and(|a| !a.is_empty()) {
                assert_eq!(annotations, *wanted, "{path}");
                assert!(annotations["eks.amazonaws.com/role-arn"].is_string(), "{path}");
            }
        }
        for variable in reader["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().unwrap_or_default();
            assert!(!WEBHOOK_VARIABLES.contains(&name), "{path}: sets {name}, which the EKS webhook owns");
        }
        // Every reader reports its sinks' health in its own lease ConfigMap.
        assert_eq!(pod["automountServiceAccountToken"], json!(true), "{path}");
    }
}

#[test]
fn the_crd_lists_sources_under_the_sluice_category() {
    let crd: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("deploy/crds/sqssource.yaml")).expect("the CRD"),
    )
    .expect("CRD YAML");
    assert_eq!(crd["spec"]["names"]["categories"], json!(["sluice"]));
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["sqss"]));
}

#[test]
fn the_iam_policies_in_the_eks_guide_parse_and_grant_no_wildcard_action() {
    let guide = std::fs::read_to_string(repo().join("docs/eks.md")).expect("docs/eks.md");
    let blocks: Vec<&str> =
        guide.split("```json").skip(1).map(|rest| rest.split("```").next().unwrap_or_default()).collect();
    assert_eq!(blocks.len(), 5, "operator policy, two trust policies, reader policy, data-role trust");
    for block in blocks {
        let policy: Value =
            serde_json::from_str(block).unwrap_or_else(|e| panic!("not JSON ({e}):\n{block}"));
        assert_eq!(policy["Version"], "2012-10-17");
        for statement in policy["Statement"].as_array().expect("statements") {
            let actions = match &statement["Action"] {
                Value::String(a) => vec![a.clone()],
                other => other
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect(),
            };
            assert!(!actions.is_empty(), "{statement}");
            assert!(actions.iter().all(|a| !a.contains('*')), "wildcard action in {statement}");
            assert_ne!(statement["Resource"], "*", "wildcard resource in {statement}");
        }
    }
}
