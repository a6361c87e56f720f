//! Prints the SqsSource CustomResourceDefinition; its output is committed at deploy/crds/sqssource.yaml.
use kube::CustomResourceExt;
fn main() {
    print!("{}", serde_yaml::to_string(&sluice_crds::SqsSource::crd()).expect("CRD serializes to YAML"));
}
