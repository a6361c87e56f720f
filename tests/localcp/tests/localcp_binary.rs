//! `sluice-localcp` as a process, the way the demo and the multi-process suite run it: kubeconfig and
//! URL files, Deployments run by the process runner, SqsSource validation, and a clean stop on SIGTERM
//! that takes the reader processes with it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use sluice_localcp::poll;

const DEADLINE: Duration = Duration::from_secs(20);

async fn wait_for_file(path: &Path) -> String {
    poll::eventually(&format!("{} to appear", path.display()), DEADLINE, || async {
        std::fs::read_to_string(path).ok().filter(|text| !text.trim().is_empty())
    })
    .await
}

async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).unwrap()
}

#[tokio::test]
async fn binary_serves_runs_pods_validates_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let url_file = dir.path().join("url");
    let state = dir.path().join("state");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice-localcp"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--url-file")
        .arg(&url_file)
        .arg("--kubelet")
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = wait_for_file(&url_file).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let client = client_from(&kubeconfig).await;

    // The Sluice validator guards SqsSource objects once the committed CRD is installed.
    let crd: CustomResourceDefinition = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/crds/sqssource.yaml")).unwrap(),
    )
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let version = crd.spec.versions[0].name.clone();
    let ar = ApiResource {
        group: "sluice.dev".into(),
        version: version.clone(),
        api_version: format!("sluice.dev/{version}"),
        kind: "SqsSource".into(),
        plural: "sqssources".into(),
    };
    let sources: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let example: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/examples/minimal-http.yaml")).unwrap(),
    )
    .unwrap();
    let name = example["metadata"]["name"].as_str().unwrap().to_owned();
    sources.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&example)).await.unwrap();
    let mut broken = example.clone();
    broken["metadata"]["name"] = json!("broken");
    broken["spec"]["queues"] = json!([]);
    match sources.patch("broken", &PatchParams::apply("test"), &Patch::Apply(&broken)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{}", s.message)
        }
        other => panic!("an SqsSource without queues was accepted: {other:?}"),
    }

    // A Deployment replica becomes a process listed in pods.json.
    let deploys: Api<Deployment> = Api::namespaced(client, "default");
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sleeper"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "s"}},
                 "template": {"metadata": {"labels": {"app": "s"}},
                              "spec": {"containers": [{"name": "c", "image": "i", "command": ["sleep", "300"]}]}}}});
    deploys.patch("sleeper", &PatchParams::apply("test"), &Patch::Apply(&d)).await.unwrap();
    let pods_file = state.join("pods.json");
    let pid = poll::eventually("the replica to start", DEADLINE, || async {
        let pods: Vec<serde_json::Value> =
            std::fs::read(&pods_file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        pods.first().and_then(|p| p["pid"].as_u64())
    })
    .await;

    // SIGTERM: the binary stops its processes and exits 0.
    let own = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    kill(own, Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        kill(Pid::from_raw(i32::try_from(pid).unwrap()), None).is_err(),
        "the replica outlived the runner"
    );
}
