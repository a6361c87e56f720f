//! The reader policy of deploy/policy/ (loaded from the repository, not copied): its CEL evaluated
//! against admission requests, then enforced by the local control plane for the tokens its process
//! runner mounts, while the operator's (administrator's) writes go through.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use sluice_protocol::{ROLE_LABEL, SOURCE_LABEL, checkpoint_configmap_name, lease_configmap_name};
use sluice_tests::controlplane::admission::policy::ParamKind;
use sluice_tests::controlplane::admission::{Operation, Request, UserInfo, evaluate};
use sluice_tests::controlplane::registry::Registry;
use sluice_tests::controlplane::sluice::{install_reader_policy, reader_policy_documents};
use sluice_tests::controlplane::{Config, ControlPlane};
use sluice_tests::kubelet::{self, Kubelet, serviceaccount};
use sluice_tests::poll;

const NS: &str = "team-a";
const SOURCE: &str = "orders";
const POD: &str = "orders-reader-7d9f8b6c5d-x2x4z";
const PEER: &str = "orders-reader-7d9f8b6c5d-q9w8e";
const SOURCE_UID: &str = "3f1c2d4e-0000-4000-a000-000000000001";

/// A reader's identity as the API server authenticates a pod-bound token.
fn reader(source: &str, pod: Option<&str>) -> UserInfo {
    UserInfo {
        username: format!("system:serviceaccount:{NS}:{source}-reader"),
        uid: "sa-uid".into(),
        groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{NS}")],
        extra: pod
            .map(|p| {
                BTreeMap::from([("authentication.kubernetes.io/pod-name".to_owned(), vec![p.to_owned()])])
            })
            .unwrap_or_default(),
    }
}

/// A lease ConfigMap as the reader writes it (reader/src/coordination/cluster.rs).
fn lease(source: &str, pod: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": lease_configmap_name(source, pod), "namespace": NS,
            "labels": {SOURCE_LABEL: source, ROLE_LABEL: "lease"},
            "ownerReferences": [{"apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource",
                "name": source, "uid": SOURCE_UID}]},
        "data": {"pod": pod, "renewedAtMs": "1"}})
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS},
        "data": {"openEpoch": "9", "committedEpoch": "9"}})
}

/// The register of reader accounts the operator writes in a namespace with sources
/// (operator/src/build/reader_registry.rs): ServiceAccount name -> source.
const REGISTER: &str = "sluice-readers";

fn register() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": REGISTER, "namespace": NS},
        "data": {format!("{SOURCE}-reader"): SOURCE, "payments-reader": "payments"}})
}

/// Evaluates the shipped policy for one ConfigMap write in NS, where the register exists.
fn admit(
    user: &UserInfo,
    operation: Operation,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), String> {
    admit_in(NS, user, operation, object, old)
}

/// Evaluates the shipped policy for one ConfigMap write in `namespace`: `Ok` or the denial message.
/// Only NS has a register of reader accounts.
fn admit_in(
    namespace: &str,
    user: &UserInfo,
    operation: Operation,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), String> {
    let registry = Registry::with_builtins();
    let rt = registry.find("", "v1", "configmaps").unwrap();
    let docs = reader_policy_documents().unwrap();
    let of_kind = |k: &str| docs.iter().filter(|d| d["kind"] == k).cloned().collect::<Vec<_>>();
    let name = object.or(old).and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap();
    let request =
        Request { resource: rt, subresource: "", operation, namespace, name, object, old_object: old, user };
    let (policies, bindings) =
        (of_kind("ValidatingAdmissionPolicy"), of_kind("ValidatingAdmissionPolicyBinding"));
    assert_eq!((policies.len(), bindings.len()), (1, 1), "deploy/policy ships one policy and one binding");
    let params = |kind: &ParamKind, ns: &str, name: &str| {
        assert_eq!(
            (kind.api_version.as_str(), kind.kind.as_str()),
            ("v1", "ConfigMap"),
            "the parameter kind"
        );
        (ns == NS && name == REGISTER).then(register)
    };
    evaluate(&policies, &bindings, &request, &params).map_err(|e| e.message)
}

fn denied_by(result: Result<(), String>, rule: &str) {
    let message = result.expect_err("the write must be refused");
    assert!(
        message.contains(&format!("rule {rule}:"))
            && message.contains("ValidatingAdmissionPolicy 'reader-own-lease.sluice.dev'"),
        "expected rule {rule}, got: {message}"
    );
}

#[test]
fn the_shipped_policy_lets_a_reader_write_its_own_lease_and_nothing_else() {
    let me = reader(SOURCE, Some(POD));
    let own = lease(SOURCE, POD);
    let mut renewed = own.clone();
    renewed["data"]["renewedAtMs"] = json!("2");

    // Allowed: create and renew the own lease.
    assert_eq!(admit(&me, Operation::Create, Some(&own), None), Ok(()));
    assert_eq!(admit(&me, Operation::Update, Some(&renewed), Some(&own)), Ok(()));

    // Denied, each by the rule that covers it.
    let peer = lease(SOURCE, PEER);
    denied_by(admit(&me, Operation::Update, Some(&peer), Some(&peer)), "own-lease-only");
    let checkpoint = config_map(&checkpoint_configmap_name(SOURCE));
    denied_by(
        admit(&me, Operation::Update, Some(&checkpoint), Some(&checkpoint)),
        "checkpoint-is-operator-only",
    );
    let other_source = lease("payments", "payments-reader-5c6d7e8f9a-abcde");
    denied_by(admit(&me, Operation::Update, Some(&other_source), Some(&other_source)), "own-lease-only");
    let other_checkpoint = config_map(&checkpoint_configmap_name("payments"));
    denied_by(admit(&me, Operation::Create, Some(&other_checkpoint), None), "checkpoint-is-operator-only");
    let unrelated = config_map("app-settings");
    denied_by(admit(&me, Operation::Update, Some(&unrelated), Some(&unrelated)), "own-lease-only");
    denied_by(admit(&me, Operation::Create, Some(&unrelated), None), "own-lease-only");
    denied_by(admit(&me, Operation::Delete, None, Some(&own)), "no-delete");

    // The own lease's name is not enough: labels and owner must be the lease scheme's.
    let mut unlabelled = own.clone();
    unlabelled["metadata"]["labels"][ROLE_LABEL] = json!("checkpoint");
    denied_by(admit(&me, Operation::Create, Some(&unlabelled), None), "lease-labels");
    let mut foreign_owner = own.clone();
    foreign_owner["metadata"]["ownerReferences"][0]["name"] = json!("payments");
    denied_by(admit(&me, Operation::Create, Some(&foreign_owner), None), "lease-owner");
    let mut blocking = own.clone();
    blocking["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true);
    denied_by(admit(&me, Operation::Update, Some(&blocking), Some(&own)), "lease-owner");

    // A reader token not bound to a pod cannot tell whose lease it is: it writes nothing.
    denied_by(admit(&reader(SOURCE, None), Operation::Create, Some(&own), None), "pod-bound-token");

    // Not a reader: the policy does not apply (the operator, an application's ServiceAccount).
    assert_eq!(admit(&UserInfo::admin(), Operation::Update, Some(&checkpoint), Some(&checkpoint)), Ok(()));
    let app =
        UserInfo { username: format!("system:serviceaccount:{NS}:billing"), ..reader(SOURCE, Some(POD)) };
    assert_eq!(admit(&app, Operation::Update, Some(&unrelated), Some(&unrelated)), Ok(()));
}

#[test]
fn the_policy_holds_registered_readers_only() {
    // An application's account named like a reader, in the namespace of a source: not registered.
    let metrics = UserInfo {
        username: format!("system:serviceaccount:{NS}:metrics-reader"),
        ..reader(SOURCE, Some(POD))
    };
    let settings = config_map("metrics-settings");
    assert_eq!(admit(&metrics, Operation::Create, Some(&settings), None), Ok(()));
    assert_eq!(admit(&metrics, Operation::Update, Some(&settings), Some(&settings)), Ok(()));
    assert_eq!(admit(&metrics, Operation::Delete, None, Some(&settings)), Ok(()));

    // The same name in a namespace without sources (no register there): the binding allows.
    let elsewhere = UserInfo {
        username: "system:serviceaccount:monitoring:metrics-reader".into(),
        ..reader(SOURCE, Some(POD))
    };
    let mut there = settings.clone();
    there["metadata"]["namespace"] = json!("monitoring");
    assert_eq!(admit_in("monitoring", &elsewhere, Operation::Update, Some(&there), Some(&there)), Ok(()));

    // A registered reader cannot edit the register (to drop itself, or to hold someone else).
    let me = reader(SOURCE, Some(POD));
    let mut edited = register();
    edited["data"] = json!({});
    denied_by(admit(&me, Operation::Update, Some(&edited), Some(&register())), "register-is-operator-only");

    // A registered account of another source is held to that source's leases.
    let payments = UserInfo { username: format!("system:serviceaccount:{NS}:payments-reader"), ..me.clone() };
    denied_by(admit(&payments, Operation::Create, Some(&lease(SOURCE, POD)), None), "own-lease-only");
}

/// A kube client that authenticates with `token`, through a kubeconfig as a pod would.
async fn client_with_token(url: &str, token: &str, dir: &Path) -> kube::Client {
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serviceaccount::render(url, NS, &token_file)).unwrap();
    client_from_kubeconfig(&path).await
}

async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(path).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A control plane with the policy installed (as `kubectl apply -k` does) and the source's
/// reader ServiceAccount created (as the operator does).
/// A control plane with the policy and the reader's ServiceAccount, and the uid of an object that
/// stands in for the source as the leases' owner: the control plane's garbage collector removes an
/// object whose owners are all absent (as a cluster's does), so a lease must name a live uid. The
/// policy reads the reference's kind and name, the collector only its uid.
async fn control_plane() -> (ControlPlane, kube::Client, String) {
    let cp = ControlPlane::start(Config::default()).await.unwrap();
    let admin = cp.client().unwrap();
    install_reader_policy(&admin).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": format!("{SOURCE}-reader")}});
    accounts.create(&PostParams::default(), &serde_json::from_value(account).unwrap()).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
    let owner = config_maps
        .create(&PostParams::default(), &serde_json::from_value(config_map("source-stand-in")).unwrap())
        .await
        .unwrap();
    let owner_uid = owner.metadata.uid.expect("a created object has a uid");
    // The register of reader accounts, as the operator applies it before any reader runs.
    let as_operator = PatchParams::apply(&format!("sluice-operator/{SOURCE}")).force();
    config_maps.patch(REGISTER, &as_operator, &Patch::Apply(register())).await.unwrap();
    (cp, admin, owner_uid)
}

/// A token for `account` in `namespace` bound to pod `pod`, as the kubelet mounts it.
async fn pod_token(admin: &kube::Client, namespace: &str, account: &str, pod: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    if accounts.get_opt(account).await.unwrap().is_none() {
        let created = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}});
        accounts.create(&PostParams::default(), &serde_json::from_value(created).unwrap()).await.unwrap();
    }
    let bound =
        BoundObjectReference { kind: Some("Pod".into()), name: Some(pod.into()), ..Default::default() };
    let request = TokenRequest {
        spec: TokenRequestSpec { bound_object_ref: Some(bound), ..TokenRequestSpec::default() },
        ..TokenRequest::default()
    };
    let issued = accounts.create_token_request(account, &PostParams::default(), &request).await.unwrap();
    issued.status.expect("a token request is answered with a token").token
}

#[tokio::test]
async fn an_unrelated_metrics_reader_keeps_its_config_map_writes_while_readers_stay_held() {
    let (cp, admin, owner_uid) = control_plane().await;
    let dir = tempfile::tempdir().unwrap();

    // `metrics-reader` in a namespace without sources, and in the sources' namespace: neither is in a
    // register, so each creates and updates its ConfigMaps as RBAC alone allows.
    for namespace in ["monitoring", NS] {
        let token = pod_token(&admin, namespace, "metrics-reader", "metrics-reader-6b7c8d9e0f-kq2lp").await;
        let sub = dir.path().join(namespace);
        std::fs::create_dir_all(&sub).unwrap();
        let client = client_with_token(&cp.url(), &token, &sub).await;
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let mut settings = config_map("metrics-settings");
        settings["metadata"]["namespace"] = json!(namespace);
        let created = api.create(&PostParams::default(), &serde_json::from_value(settings).unwrap()).await;
        let created = created.unwrap_or_else(|e| panic!("metrics-reader in {namespace} may create: {e}"));
        let mut updated = created.clone();
        updated.data.get_or_insert_default().insert("scrapeInterval".into(), "15s".into());
        let replaced = api.replace("metrics-settings", &PostParams::default(), &updated).await;
        let replaced = replaced.unwrap_or_else(|e| panic!("metrics-reader in {namespace} may update: {e}"));
        assert_eq!(replaced.data.unwrap()["scrapeInterval"], "15s");
        println!("metrics-reader in {namespace}: created and updated ConfigMap metrics-settings");
    }

    // The registered reader is still held to its own lease, and cannot touch the register.
    let token = pod_token(&admin, NS, &format!("{SOURCE}-reader"), POD).await;
    let reader = client_with_token(&cp.url(), &token, dir.path()).await;
    let as_reader: Api<ConfigMap> = Api::namespaced(reader, NS);
    let own: ConfigMap = serde_json::from_value(live_lease(SOURCE, POD, &owner_uid)).unwrap();
    as_reader.create(&PostParams::default(), &own).await.unwrap();
    let e = api_error(
        as_reader.create(&PostParams::default(), &serde_json::from_value(config_map("x")).unwrap()).await,
    );
    assert!(e.message.contains("rule own-lease-only:"), "{}", e.message);
    let e = api_error(
        as_reader
            .patch(REGISTER, &PatchParams::default(), &Patch::Merge(json!({"data": {"metrics-reader": "x"}})))
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{}", e.message);
    assert!(e.message.contains("rule register-is-operator-only:"), "{}", e.message);
    println!("{SOURCE}-reader: own lease written; other ConfigMaps and the register refused");
    cp.shutdown().await.unwrap();
}

/// `lease(source, pod)` owned by the live object `owner_uid`.
fn live_lease(source: &str, pod: &str, owner_uid: &str) -> Value {
    let mut lease = lease(source, pod);
    lease["metadata"]["ownerReferences"][0]["uid"] = json!(owner_uid);
    lease
}

#[tokio::test]
async fn with_a_reader_token_the_control_plane_refuses_what_the_policy_denies() {
    let (cp, admin, owner_uid) = control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            bound_object_ref: Some(BoundObjectReference {
                kind: Some("Pod".into()),
                name: Some(POD.into()),
                ..BoundObjectReference::default()
            }),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(&format!("{SOURCE}-reader"), &PostParams::default(), &request)
        .await
        .unwrap();
    let token = issued.status.unwrap().token;
    let reader = client_with_token(&cp.url(), &token, dir.path()).await;
    let as_reader: Api<ConfigMap> = Api::namespaced(reader.clone(), NS);
    let as_operator: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);

    // The operator's own writes go through: the checkpoint, an unrelated ConfigMap.
    let checkpoint = checkpoint_configmap_name(SOURCE);
    let apply = PatchParams::apply("sluice-checkpoint");
    as_operator.patch(&checkpoint, &apply, &Patch::Apply(config_map(&checkpoint))).await.unwrap();
    as_operator
        .create(&PostParams::default(), &serde_json::from_value(config_map("app-settings")).unwrap())
        .await
        .unwrap();

    // The reader creates and renews its own lease.
    let own: ConfigMap = serde_json::from_value(live_lease(SOURCE, POD, &owner_uid)).unwrap();
    let created = as_reader.create(&PostParams::default(), &own).await.unwrap();
    let mut renewed = created.clone();
    renewed.data.get_or_insert_default().insert("renewedAtMs".into(), "2".into());
    as_reader.replace(&lease_configmap_name(SOURCE, POD), &PostParams::default(), &renewed).await.unwrap();
    // It still reads what it needs.
    assert!(as_reader.get(&checkpoint).await.is_ok());

    // It cannot write the checkpoint, nor an unrelated ConfigMap, by any verb.
    let e = api_error(
        as_reader
            .patch(
                &checkpoint,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"committedEpoch": "10"}})),
            )
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{}", e.message);
    assert!(e.message.contains("rule checkpoint-is-operator-only:"), "{}", e.message);
    assert!(
        e.message.contains("ValidatingAdmissionPolicy 'reader-own-lease.sluice.dev' with binding"),
        "{}",
        e.message
    );
    let e = api_error(
        as_reader
            .patch(
                "app-settings",
                &PatchParams::apply("evil").force(),
                &Patch::Apply(config_map("app-settings")),
            )
            .await,
    );
    assert!(e.message.contains("rule own-lease-only:"), "{}", e.message);
    let e = api_error(
        as_reader
            .create(&PostParams::default(), &serde_json::from_value(config_map("new-settings")).unwrap())
            .await,
    );
    assert!(e.message.contains("rule own-lease-only:"), "{}", e.message);
    let e = api_error(as_reader.delete("app-settings", &DeleteParams::default()).await);
    assert!(e.message.contains("rule no-delete:"), "{}", e.message);
    let stored = as_operator.get(&checkpoint).await.unwrap();
    assert_eq!(
        stored.data.unwrap()["committedEpoch"],
        "9",
        "the refused write left the checkpoint as it was"
    );

    // A reader cannot mint tokens, and a token the control plane did not issue is not a user.
    let e = api_error(
        Api::<ServiceAccount>::namespaced(reader, NS)
            .create_token_request(&format!("{SOURCE}-reader"), &PostParams::default(), &request)
            .await,
    );
    assert_eq!(e.code, 403, "{}", e.message);
    let stranger = client_with_token(&cp.url(), "not-a-token", dir.path()).await;
    let e = api_error(Api::<ConfigMap>::namespaced(stranger, NS).get(&checkpoint).await);
    assert_eq!(e.code, 401, "{}", e.message);
    cp.shutdown().await.unwrap();
}

/// A shell "pod" of ServiceAccount `<source>-reader` that prints the KUBECONFIG it was given.
fn shell_deployment(name: &str, replicas: i32, automount: bool) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "serviceAccountName": format!("{SOURCE}-reader"), "automountServiceAccountToken": automount,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "ignored", "command": ["/bin/sh", "-c"],
                    "args": ["echo \"kubeconfig=$KUBECONFIG\"; while true; do sleep 0.1; done"]}]}}}})
}

/// What `check` finds, polled every 100 ms for up to 20 s (the runner works in ticks).
async fn found<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    poll::eventually(what, Duration::from_secs(20), || std::future::ready(check())).await
}

#[tokio::test]
async fn the_runner_mounts_each_pod_a_token_bound_to_it_unless_it_opts_out() {
    let (cp, admin, owner_uid) = control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = kubelet::Config::in_dir(dir.path());
    config.api_url = Some(cp.url());
    config.tick = Duration::from_millis(100);
    let runner = Kubelet::start(admin.clone(), config).unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(admin.clone(), NS);
    let apply = |name: String, body: Value| {
        let deployments = deployments.clone();
        async move { deployments.patch(&name, &PatchParams::apply("test"), &Patch::Apply(body)).await.unwrap() }
    };
    apply(format!("{SOURCE}-reader"), shell_deployment(&format!("{SOURCE}-reader"), 2, true)).await;
    let pods = found("two running pods", || {
        Some(runner.pods()).filter(|p| p.iter().filter(|p| p.pid.is_some()).count() == 2)
    })
    .await;
    let kubeconfig_of = |pod: &kubelet::PodInfo| {
        let log = std::fs::read_to_string(&pod.log).ok()?;
        log.lines().find_map(|l| l.strip_prefix("kubeconfig=")).map(str::to_owned)
    };

    let mut clients = Vec::new();
    for me in &pods {
        // The process got its own kubeconfig in KUBECONFIG, not the runner's.
        let path = found("the kubeconfig line", || kubeconfig_of(me)).await;
        assert!(path.contains(&me.name), "{path}");
        let as_pod: Api<ConfigMap> = Api::namespaced(client_from_kubeconfig(Path::new(&path)).await, NS);
        let own: ConfigMap = serde_json::from_value(live_lease(SOURCE, &me.name, &owner_uid)).unwrap();
        as_pod.create(&PostParams::default(), &own).await.unwrap();
        clients.push(as_pod);
    }
    // The token is bound to its pod: a pod's lease is its own, its peer's is not.
    for (as_pod, (me, peer)) in clients.iter().zip([(&pods[0], &pods[1]), (&pods[1], &pods[0])]) {
        let name = lease_configmap_name(SOURCE, &peer.name);
        let stolen = as_pod.get(&name).await.unwrap();
        let e = api_error(as_pod.replace(&name, &PostParams::default(), &stolen).await);
        assert!(e.message.contains("rule own-lease-only:") && e.message.contains(&me.name), "{}", e.message);
    }

    // A pod that opts out of the token gets none: its KUBECONFIG names no file, as such a pod has
    // no credentials.
    apply(format!("{SOURCE}-quiet"), shell_deployment(&format!("{SOURCE}-quiet"), 1, false)).await;
    let quiet = found("the quiet pod", || {
        runner.pods().into_iter().find(|p| p.deployment == format!("{SOURCE}-quiet") && p.pid.is_some())
    })
    .await;
    let path = found("the quiet pod's kubeconfig line", || kubeconfig_of(&quiet)).await;
    assert!(path.contains(&quiet.name) && !Path::new(&path).exists(), "{path}");
    assert!(!Path::new(&path).with_file_name("token").exists(), "{path}");
    runner.shutdown().await;
    cp.shutdown().await.unwrap();
}
