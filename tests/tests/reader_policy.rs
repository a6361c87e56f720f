//! The reader policy of deploy/policy/, installed as shipped and enforced by the real API server, for
//! tokens exactly as the kubelet mounts them: a reader writes its own lease and is refused every
//! other ConfigMap, the checkpoint and the register of reader accounts; an unrelated ServiceAccount
//! whose name ends in `-reader` keeps its writes; tokens the server did not issue are not users.
//!
//! The pods are real pods of a Deployment, scheduled onto the process kubelet, which requests each a
//! token bound to it (TokenRequest with the pod as `boundObjectRef`) and hands the process a
//! kubeconfig that reads it; the test then acts with those kubeconfigs. RBAC is what the operator
//! grants readers (operator/src/build/rbac.rs): ConfigMaps in their namespace; the policy narrows it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_protocol::{ROLE_LABEL, SOURCE_LABEL, checkpoint_configmap_name, lease_configmap_name};
use sluice_tests::install;
use sluice_tests::kubeconfig::{self, Credentials};
use sluice_tests::poll;
use sluice_tests::system::{System, bin_dir};

const SOURCE: &str = "orders";
/// The register of reader accounts the operator writes in a namespace with sources
/// (operator/src/build/reader_registry.rs): ServiceAccount name -> source.
const REGISTER: &str = "sluice-readers";

/// A lease ConfigMap as the reader writes it (labels and owner as the lease scheme has them).
fn lease(ns: &str, pod: &str, owner_uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": lease_configmap_name(SOURCE, pod), "namespace": ns,
            "labels": {SOURCE_LABEL: SOURCE, ROLE_LABEL: "lease"},
            "ownerReferences": [{"apiVersion": "sluice.dev/v1alpha1", "kind": "SqsSource",
                "name": SOURCE, "uid": owner_uid}]},
        "data": {"pod": pod, "renewedAtMs": "1"}})
}

fn config_map(ns: &str, name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
        "data": {"openEpoch": "9", "committedEpoch": "9"}}))
    .unwrap()
}

/// A Role wider than the readers' ClusterRole (it adds `delete`), and a binding of it to
/// `account`: what the policy refuses here, it refuses whatever RBAC allows.
async fn grant_config_maps(admin: &kube::Client, ns: &str, account: &str) {
    let docs = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": account},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]}),
    ];
    for doc in docs {
        install::apply(admin, &doc, Some(ns)).await.unwrap();
    }
}

/// A Deployment of `replicas` shell pods running as `account` that print the KUBECONFIG they got.
async fn shell_pods(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    account: &str,
    replicas: i32,
    automount: bool,
) {
    let doc = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "serviceAccountName": account, "automountServiceAccountToken": automount,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "command": ["/bin/sh", "-c"],
                    "args": ["echo \"kubeconfig=$KUBECONFIG\"; while true; do sleep 0.1; done"]}]}}}});
    install::apply(admin, &doc, Some(ns)).await.unwrap();
}

/// The pods of Deployment `name` with the kubeconfig each process was given (`None`: none given).
async fn kubeconfigs(system: &System, name: &str, replicas: usize) -> Vec<(String, Option<PathBuf>)> {
    poll::eventually(
        &format!("{replicas} pods of {name} printing their KUBECONFIG"),
        Duration::from_secs(60),
        || async {
            let pods: Vec<_> =
                system.pods().into_iter().filter(|p| p.deployment == name && p.pid.is_some()).collect();
            let mut out = Vec::new();
            for pod in &pods {
                let log = std::fs::read_to_string(&pod.log).ok()?;
                let line = log.lines().find_map(|l| l.strip_prefix("kubeconfig="))?;
                out.push((pod.name.clone(), (!line.is_empty()).then(|| PathBuf::from(line))));
            }
            (out.len() == replicas).then_some(out)
        },
    )
    .await
}

async fn client(path: &Path) -> kube::Client {
    kubeconfig::client(path).await.unwrap()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn denied_by(result: Result<impl std::fmt::Debug, kube::Error>, rule: &str) {
    let e = api_error(result);
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{}", e.message);
    assert!(
        e.message.contains(&format!("rule {rule}:"))
            && e.message.contains("ValidatingAdmissionPolicy 'reader-own-lease.sluice.dev'"),
        "expected rule {rule}, got: {}",
        e.message
    );
}

/// The namespace with a source, its register and its reader account, as the operator sets them up;
/// returns the source's uid (the leases' owner: the garbage collector removes a lease whose owner
/// does not exist).
async fn source_namespace(system: &System) -> String {
    let ns = &system.namespace;
    let source = system
        .apply_source(&format!(
            "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata:\n  name: {SOURCE}\nspec:\n  queues:\n  - url: \
             http://127.0.0.1:4566/queue/us-east-1/000000000000/{SOURCE}\n  sinks:\n  - name: log\n    log: {{}}\n"
        ))
        .await
        .unwrap();
    grant_config_maps(&system.client, ns, &format!("{SOURCE}-reader")).await;
    // As the operator writes it: each source's key by a merge patch (the register made first).
    let register: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": REGISTER, "namespace": ns}})).unwrap();
    let as_operator = PostParams { field_manager: Some("sluice-operator".into()), ..PostParams::default() };
    let registers = Api::<ConfigMap>::namespaced(system.client.clone(), ns);
    registers.create(&as_operator, &register).await.unwrap();
    let keys = json!({"data": {format!("{SOURCE}-reader"): SOURCE, "payments-reader": "payments"}});
    let merge = PatchParams { field_manager: Some("sluice-operator".into()), ..PatchParams::default() };
    registers.patch(REGISTER, &merge, &Patch::Merge(keys)).await.unwrap();
    source.metadata.uid.expect("a created object has a uid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kubelet_mounted_tokens_readers_write_their_own_lease_and_nothing_else() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reader-policy");
    let _ = std::fs::remove_dir_all(&dir);
    let system = System::start(&bin_dir(), &dir).await.unwrap();
    let ns = system.namespace.clone();
    let owner = source_namespace(&system).await;
    let admin: Api<ConfigMap> = Api::namespaced(system.client.clone(), &ns);
    let checkpoint = checkpoint_configmap_name(SOURCE);
    admin.create(&PostParams::default(), &config_map(&ns, &checkpoint)).await.unwrap();
    admin.create(&PostParams::default(), &config_map(&ns, "app-settings")).await.unwrap();

    let deployment = format!("{SOURCE}-reader");
    shell_pods(&system.client, &ns, &deployment, &deployment, 2, true).await;
    let pods = kubeconfigs(&system, &deployment, 2).await;
    let mut readers = Vec::new();
    for (pod, path) in &pods {
        let path = path.as_ref().unwrap_or_else(|| panic!("{pod} got no kubeconfig"));
        assert!(path.to_string_lossy().contains(pod.as_str()), "{pod}: {}", path.display());
        let as_pod: Api<ConfigMap> = Api::namespaced(client(path).await, &ns);
        // Its own lease: created and renewed.
        let own: ConfigMap = serde_json::from_value(lease(&ns, pod, &owner)).unwrap();
        let created = as_pod.create(&PostParams::default(), &own).await.unwrap();
        let mut renewed = created.clone();
        renewed.data.get_or_insert_default().insert("renewedAtMs".into(), "2".into());
        as_pod.replace(&lease_configmap_name(SOURCE, pod), &PostParams::default(), &renewed).await.unwrap();
        // It still reads what it needs.
        assert!(as_pod.get(&checkpoint).await.is_ok());
        readers.push((pod.clone(), as_pod));
    }
    println!("{deployment}: two pods created and renewed their own leases with kubelet-mounted tokens");

    // The API server enforces a policy once its caches hold the policy, the binding and the
    // register, which a cluster started seconds ago may not yet: wait (a dry run changes nothing)
    // until the peer's lease is refused.
    let (_, first) = &readers[0];
    let peer_lease = lease_configmap_name(SOURCE, &readers[1].0);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    poll::until(Duration::from_secs(30), Duration::from_millis(250), || async {
        let lease = first.get(&peer_lease).await?;
        let refused = first.replace(&peer_lease, &dry_run, &lease).await.is_err();
        Ok(poll::Check::met_if(refused, || "the reader policy is not enforced yet".to_owned()))
    })
    .await
    .unwrap();

    // The token is bound to its pod: the peer's lease is not its own.
    for ((me, as_me), (peer, _)) in readers.iter().zip(readers.iter().rev()) {
        let name = lease_configmap_name(SOURCE, peer);
        let stolen = as_me.get(&name).await.unwrap();
        let e = api_error(as_me.replace(&name, &PostParams::default(), &stolen).await);
        assert!(
            e.message.contains("rule own-lease-only:") && e.message.contains(me.as_str()),
            "{}",
            e.message
        );
    }
    let (me, as_me) = &readers[0];
    let commit = Patch::Merge(json!({"data": {"committedEpoch": "10"}}));
    denied_by(
        as_me.patch(&checkpoint, &PatchParams::default(), &commit).await,
        "checkpoint-is-operator-only",
    );
    let edit = Patch::Merge(json!({"data": {"metrics-reader": "x"}}));
    denied_by(as_me.patch(REGISTER, &PatchParams::default(), &edit).await, "register-is-operator-only");
    denied_by(
        as_me
            .patch(
                "app-settings",
                &PatchParams::apply("evil").force(),
                &Patch::Apply(config_map(&ns, "app-settings")),
            )
            .await,
        "own-lease-only",
    );
    denied_by(as_me.create(&PostParams::default(), &config_map(&ns, "new-settings")).await, "own-lease-only");
    denied_by(as_me.delete("app-settings", &DeleteParams::default()).await, "no-delete");
    // The own lease's name is not enough: the labels and the owner must be the lease scheme's.
    let name = lease_configmap_name(SOURCE, me);
    let relabel = Patch::Merge(json!({"metadata": {"labels": {ROLE_LABEL: "checkpoint"}}}));
    denied_by(as_me.patch(&name, &PatchParams::default(), &relabel).await, "lease-labels");
    let mut foreign = lease(&ns, me, &owner);
    foreign["metadata"]["ownerReferences"][0]["name"] = json!("payments");
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!(owner);
    denied_by(
        as_me.patch(&name, &PatchParams::apply("reader").force(), &Patch::Apply(foreign)).await,
        "lease-owner",
    );
    let stored = admin.get(&checkpoint).await.unwrap();
    assert_eq!(
        stored.data.unwrap()["committedEpoch"],
        "9",
        "the refused write left the checkpoint as it was"
    );
    println!("{me}: the peer's lease, the checkpoint, the register, other ConfigMaps and deletes refused");

    // A token of the reader's account not bound to a pod cannot tell whose lease it is.
    let accounts: Api<ServiceAccount> = Api::namespaced(system.client.clone(), &ns);
    let unbound = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(600), ..TokenRequestSpec::default() },
        ..TokenRequest::default()
    };
    let token = accounts.create_token_request(&deployment, &PostParams::default(), &unbound).await.unwrap();
    let token_file = dir.join("unbound.token");
    std::fs::write(&token_file, token.status.unwrap().token).unwrap();
    let path = dir.join("unbound.kubeconfig");
    let cluster = system.cluster();
    kubeconfig::write(
        &path,
        &kubeconfig::render(&cluster.url, &cluster.ca, Credentials::TokenFile(&token_file), &ns),
    )
    .unwrap();
    let unbound_reader: Api<ConfigMap> = Api::namespaced(client(&path).await, &ns);
    denied_by(unbound_reader.create(&PostParams::default(), &config_map(&ns, "x")).await, "pod-bound-token");

    // A reader cannot mint tokens (RBAC), and a token the server did not issue is not a user.
    let e = api_error(
        Api::<ServiceAccount>::namespaced(as_me.clone().into_client(), &ns)
            .create_token_request(&deployment, &PostParams::default(), &unbound)
            .await,
    );
    assert_eq!(e.code, 403, "{}", e.message);
    std::fs::write(&token_file, "not-a-token").unwrap();
    let stranger: Api<ConfigMap> = Api::namespaced(client(&path).await, &ns);
    assert_eq!(api_error(stranger.get(&checkpoint).await).code, 401);

    // A pod that opts out of the token gets none: no kubeconfig, as such a pod has no credentials.
    shell_pods(&system.client, &ns, "orders-quiet", &deployment, 1, false).await;
    let quiet = kubeconfigs(&system, "orders-quiet", 1).await;
    assert_eq!(quiet[0].1, None, "a pod with automountServiceAccountToken: false got {:?}", quiet[0].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_metrics_reader_keeps_its_config_map_writes() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reader-policy-unrelated");
    let _ = std::fs::remove_dir_all(&dir);
    let system = System::start(&bin_dir(), &dir).await.unwrap();
    source_namespace(&system).await;
    // `metrics-reader` in the sources' namespace (not in its register) and in one without sources.
    let elsewhere = format!("{}-monitoring", system.namespace);
    let namespaces: Api<Namespace> = Api::all(system.client.clone());
    let created: Namespace = serde_json::from_value(json!({"metadata": {"name": elsewhere}})).unwrap();
    namespaces.create(&PostParams::default(), &created).await.unwrap();
    for ns in [system.namespace.clone(), elsewhere.clone()] {
        grant_config_maps(&system.client, &ns, "metrics-reader").await;
        shell_pods(&system.client, &ns, "metrics-reader", "metrics-reader", 1, true).await;
    }
    for (ns, pod) in [(system.namespace.clone(), kubeconfigs(&system, "metrics-reader", 1).await)] {
        let path = pod[0].1.clone().expect("a kubeconfig");
        let api: Api<ConfigMap> = Api::namespaced(client(&path).await, &ns);
        let created = api.create(&PostParams::default(), &config_map(&ns, "metrics-settings")).await;
        let created = created.unwrap_or_else(|e| panic!("metrics-reader in {ns} may create: {e}"));
        let mut updated = created.clone();
        updated.data.get_or_insert_default().insert("scrapeInterval".into(), "15s".into());
        api.replace("metrics-settings", &PostParams::default(), &updated).await.unwrap();
        api.delete("metrics-settings", &DeleteParams::default()).await.unwrap();
        println!("metrics-reader in {ns}: created, updated and deleted ConfigMap metrics-settings");
    }
    // The pod in the namespace without sources runs on the same node; its log is named by namespace.
    let other = poll::eventually(
        "the other namespace's metrics-reader kubeconfig",
        Duration::from_secs(60),
        || async {
            let logs = std::fs::read_dir(&system.cluster().logs_dir).ok()?;
            let log = logs.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{elsewhere}_metrics-reader-")))
            })?;
            let text = std::fs::read_to_string(log).ok()?;
            text.lines()
                .find_map(|l| l.strip_prefix("kubeconfig="))
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
        },
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client(&other).await, &elsewhere);
    api.create(&PostParams::default(), &config_map(&elsewhere, "metrics-settings")).await.unwrap();
    println!("metrics-reader in {elsewhere}: created ConfigMap metrics-settings");
    namespaces.delete(&elsewhere, &DeleteParams::default()).await.unwrap();
}
