//! The fields an EKS install uses, judged as the apiserver would: the EKS examples validate (CEL
//! rules of `spec.reader` included), amounts of the reader's resources must be quoted strings,
//! typos are named with their path, and the CRD joins the `sluice` category so that
//! `kubectl get sluice` lists sources.

mod support;

use kube::CustomResourceExt;
use serde_json::json;
use sluice_crds::SqsSource;
use sluice_crds::validate::parse_source_yaml;
use support::{full, rejected};

#[test]
fn every_eks_example_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/eks");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/examples/eks exists") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        if let Err(e) = parse_source_yaml(&text) {
            panic!("{} is invalid:\n{e}", path.display());
        }
        seen += 1;
    }
    assert_eq!(seen, 3, "standard to HTTP, FIFO forward with a DLQ, exactly-once to S3 with KMS");
}

#[test]
fn a_resource_amount_must_be_a_quoted_quantity() {
    let mut v = full();
    v["spec"]["reader"]["resources"]["requests"]["cpu"] = json!(1);
    assert_eq!(
        rejected(&v).to_string(),
        "spec.reader.resources.requests.cpu: must be a string (got number 1)"
    );

    let mut v = full();
    v["spec"]["reader"]["resources"]["requests"]["gpu"] = json!("1");
    let err = rejected(&v);
    assert!(err.to_string().starts_with("spec.reader.resources.requests.gpu: unknown field"), "{err}");
}

#[test]
fn a_misspelt_service_account_field_is_named_with_its_path() {
    let mut v = full();
    v["spec"]["reader"]["serviceAccount"]["annotation"] = json!({"eks.amazonaws.com/role-arn": "x"});
    let err = rejected(&v);
    assert!(
        err.to_string()
            .starts_with("spec.reader.serviceAccount.annotation: unknown field (did you mean annotations?)"),
        "{err}"
    );
}

#[test]
fn embedded_kubernetes_types_are_checked_like_a_pod_spec() {
    let mut v = full();
    v["spec"]["reader"]["tolerations"][0]["tolerationSeconds"] = json!("soon");
    let err = rejected(&v);
    assert!(
        err.to_string().starts_with("spec.reader.tolerations[0].tolerationSeconds: must be a whole number"),
        "{err}"
    );

    let mut v = full();
    v["spec"]["reader"]["env"][0]["valueFrom"] =
        json!({"resourceFieldRef": {"resource": "limits.memory", "divisor": {"x": 1}}});
    let err = rejected(&v);
    assert!(err.to_string().contains("divisor: must be a whole number or a string"), "{err}");
}

#[test]
fn sources_are_in_the_sluice_category() {
    let crd = SqsSource::crd();
    assert_eq!(crd.spec.names.categories, Some(vec!["sluice".to_owned()]));
}
