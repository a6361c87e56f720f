use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::*;

fn at<K: Resource<DynamicType = ()> + Default>(name: &str, version: &str) -> K {
    let mut object = K::default();
    *object.meta_mut() = ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        resource_version: Some(version.into()),
        ..ObjectMeta::default()
    };
    object
}

fn deployment(version: &str, generation: i64, revision: &str) -> Deployment {
    let mut d: Deployment = at("orders-reader", version);
    d.metadata.generation = Some(generation);
    d.metadata.annotations = Some(BTreeMap::from([(DEPLOYMENT_REVISION.to_owned(), revision.to_owned())]));
    d
}

/// Applies `object` as version `version` the way `apply.rs` does.
fn apply<K: Resource<DynamicType = ()> + Default + Serialize + Clone>(
    own: &OwnWrites,
    object: &K,
    version: &str,
) -> u64 {
    let hash = content_hash(object);
    let mark = own.mark();
    let mut answer = object.clone();
    answer.meta_mut().resource_version = Some(version.into());
    own.applied(&answer, "sluice-operator", hash, mark);
    hash
}

#[test]
fn the_echo_of_an_own_write_is_dropped_once_and_other_writes_pass() {
    let own = OwnWrites::default();
    own.wrote(&at::<Deployment>("orders-reader", "10"));
    own.wrote(&at::<Deployment>("orders-reader", "11"));
    assert!(!own.saw(Seen::Applied(&at::<Deployment>("orders-reader", "10"))));
    assert!(!own.saw(Seen::Applied(&at::<Deployment>("orders-reader", "11"))));
    assert!(own.saw(Seen::Applied(&at::<Deployment>("orders-reader", "11"))), "an echo is answered once");
    // The Deployment controller's status write, and a deletion, carry versions of their own.
    assert!(own.saw(Seen::Applied(&at::<Deployment>("orders-reader", "12"))));
    assert!(own.saw(Seen::Deleted(&at::<Deployment>("orders-reader", "13"))));
}

#[test]
fn a_later_echo_forgets_earlier_versions_and_kinds_are_apart() {
    let own = OwnWrites::default();
    for version in ["1", "2", "3"] {
        own.wrote(&at::<ConfigMap>("orders-config", version));
    }
    assert!(own.saw(Seen::Applied(&at::<Deployment>("orders-config", "3"))), "same name, other kind");
    assert!(!own.saw(Seen::Applied(&at::<ConfigMap>("orders-config", "3"))));
    assert!(own.saw(Seen::Applied(&at::<ConfigMap>("orders-config", "1"))), "older than an echo seen");
}

#[test]
fn only_the_last_few_versions_of_a_child_are_kept() {
    let own = OwnWrites::default();
    for version in 1..=10 {
        own.wrote(&at::<ConfigMap>("orders-config", &version.to_string()));
    }
    // An unchanged apply answers the version it had: recorded once.
    own.wrote(&at::<ConfigMap>("orders-config", "10"));
    let kept: Vec<String> = own.ledger().children.values().flat_map(|e| e.written.clone()).collect();
    assert_eq!(kept, ["7", "8", "9", "10"]);
}

#[test]
fn an_apply_of_the_same_object_is_skipped_until_someone_else_writes_the_child() {
    let own = OwnWrites::default();
    let mut config: ConfigMap = at("orders-config", "");
    config.data = Some(BTreeMap::from([("source.yaml".to_owned(), "a".to_owned())]));
    let hash = apply(&own, &config, "5");
    assert!(own.unchanged(&config, "sluice-operator", hash));
    assert!(!own.unchanged(&config, "sluice-scaler", hash), "another manager's apply is its own");
    assert!(!own.saw(Seen::Applied(&at::<ConfigMap>("orders-config", "5"))), "our echo");
    assert!(own.unchanged(&config, "sluice-operator", hash), "an echo changes nothing");

    let mut edited = config.clone();
    edited.data = Some(BTreeMap::from([("source.yaml".to_owned(), "b".to_owned())]));
    assert!(!own.unchanged(&edited, "sluice-operator", content_hash(&edited)), "a new spec is applied");

    // `kubectl edit`: a ConfigMap's metadata cannot show what changed, so any other write counts.
    assert!(own.saw(Seen::Applied(&at::<ConfigMap>("orders-config", "6"))));
    assert!(!own.unchanged(&config, "sluice-operator", hash));
    let hash = apply(&own, &config, "7");
    assert!(own.unchanged(&config, "sluice-operator", hash), "restored");
}

#[test]
fn a_change_by_someone_else_during_the_apply_makes_it_stale() {
    let own = OwnWrites::default();
    let config: ConfigMap = at("orders-config", "");
    let hash = content_hash(&config);
    let mark = own.mark();
    // Someone's write lands between the request and the recording of its answer.
    assert!(own.saw(Seen::Applied(&at::<ConfigMap>("orders-config", "9"))));
    own.applied(&at::<ConfigMap>("orders-config", "8"), "sluice-operator", hash, mark);
    assert!(!own.unchanged(&config, "sluice-operator", hash));
}

#[test]
fn a_deleted_child_is_applied_again_even_by_an_apply_that_was_under_way() {
    let own = OwnWrites::default();
    let config: ConfigMap = at("orders-config", "");
    let hash = content_hash(&config);
    let mark = own.mark();
    assert!(own.saw(Seen::Deleted(&at::<ConfigMap>("orders-config", "4"))));
    own.applied(&at::<ConfigMap>("orders-config", "3"), "sluice-operator", hash, mark);
    assert!(!own.unchanged(&config, "sluice-operator", hash));
    let hash = apply(&own, &config, "5");
    assert!(own.unchanged(&config, "sluice-operator", hash), "created again after the deletion");
}

#[test]
fn a_deployments_status_and_revision_writes_start_reconciles_but_leave_the_apply_standing() {
    let own = OwnWrites::default();
    let desired = deployment("", 1, "");
    let hash = apply(&own, &desired, "20");
    assert!(!own.saw(Seen::Applied(&deployment("20", 1, ""))), "our echo");
    assert!(own.saw(Seen::Applied(&deployment("21", 1, "1"))), "the controller's revision annotation");
    assert!(own.saw(Seen::Applied(&deployment("22", 1, "1"))), "its status write");
    assert!(own.unchanged(&desired, "sluice-operator", hash));

    // The autoscaler's replica change is its own write: a new generation, but no one else's.
    own.wrote(&deployment("23", 2, "1"));
    assert!(!own.saw(Seen::Applied(&deployment("23", 2, "1"))));
    assert!(own.unchanged(&desired, "sluice-operator", hash));

    // `kubectl edit` of the spec moves the generation.
    assert!(own.saw(Seen::Applied(&deployment("24", 3, "1"))));
    assert!(!own.unchanged(&desired, "sluice-operator", hash));
}

#[test]
fn a_relisted_deployment_with_the_same_metadata_is_no_change() {
    let own = OwnWrites::default();
    assert!(own.saw(Seen::Applied(&deployment("30", 4, "2"))), "first sight");
    let hash = apply(&own, &deployment("", 4, "2"), "31");
    assert!(!own.saw(Seen::Applied(&deployment("31", 4, "2"))), "our echo");
    // A watch restarted: the same Deployment listed again starts a reconcile, which need not apply.
    assert!(own.saw(Seen::Applied(&deployment("31", 4, "2"))));
    assert!(own.unchanged(&deployment("", 4, "2"), "sluice-operator", hash));
}

#[test]
fn deletions_long_past_are_forgotten() {
    let own = OwnWrites::default();
    own.saw(Seen::Deleted(&at::<ConfigMap>("old-config", "1")));
    own.ledger().children.values_mut().for_each(|e| e.gone = Instant::now().checked_sub(GONE_KEPT));
    own.saw(Seen::Deleted(&at::<ConfigMap>("new-config", "2")));
    let names: Vec<String> = own.ledger().children.keys().map(|(_, _, name)| name.clone()).collect();
    assert_eq!(names, ["new-config"]);
}

#[test]
fn a_sources_finalizer_patch_is_its_own_echo_and_leaves_no_record() {
    let own = OwnWrites::default();
    let source = |version: &str| {
        let mut s = crate::fixtures::source(crate::fixtures::BASIC);
        s.metadata.resource_version = Some(version.into());
        s
    };
    assert!(!own.is_echo(&source("1")), "nothing written");
    own.wrote(&source("2"));
    assert!(own.is_echo(&source("2")));
    assert!(!own.is_echo(&source("3")), "the status write after it is someone's");
    assert!(own.ledger().children.is_empty());
}

#[test]
fn a_withdrawn_entry_is_applied_again_by_a_source_of_the_same_name() {
    let own = OwnWrites::default();
    let mut entry: ConfigMap = at("sluice-readers", "");
    entry.data = Some(BTreeMap::from([("orders-reader".to_owned(), "orders".to_owned())]));
    let hash = content_hash(&entry);
    let mark = own.mark();
    own.applied(&at::<ConfigMap>("sluice-readers", "40"), "sluice-operator/orders", hash, mark);
    own.applied(&at::<ConfigMap>("sluice-readers", "41"), "sluice-operator/billing", hash, mark);
    assert!(own.unchanged(&entry, "sluice-operator/orders", hash));
    own.withdrawn(&at::<ConfigMap>("sluice-readers", ""), "sluice-operator/orders");
    assert!(!own.unchanged(&entry, "sluice-operator/orders", hash), "orders was deleted and made again");
    assert!(own.unchanged(&entry, "sluice-operator/billing", hash), "another source's entry stands");
}
