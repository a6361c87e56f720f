//! The process runner against the local control plane: replicas become processes with the downward
//! API env and ConfigMap files, crashes restart, scale-down sends SIGTERM (then SIGKILL), template
//! changes roll, and the Deployment status follows.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use sluice_localcp::controlplane::{Config, ControlPlane};
use sluice_localcp::kubelet::{self, Kubelet, PodInfo};
use sluice_localcp::poll;

const DEADLINE: Duration = Duration::from_secs(20);

/// What `check` finds, polled every 100 ms, panicking with `what` after [`DEADLINE`].
async fn eventually<T, Fut: Future<Output = Option<T>>>(what: &str, check: impl FnMut() -> Fut) -> T {
    poll::eventually(what, DEADLINE, check).await
}

fn running(k: &Kubelet, deployment: &str) -> Vec<PodInfo> {
    k.pods().into_iter().filter(|p| p.deployment == deployment && !p.terminating && p.pid.is_some()).collect()
}

/// A shell "reader": prints its identity and mounted file, says goodbye on SIGTERM (or ignores it).
fn deployment(name: &str, replicas: i32, greeting: &str, ignore_term: bool) -> serde_json::Value {
    let trap = if ignore_term { "trap '' TERM" } else { "trap 'echo got-term; exit 0' TERM" };
    let script = format!(
        "{trap}; echo {greeting} $POD_NAME $POD_NAMESPACE; cat /etc/demo/key.txt; echo; \
         while true; do sleep 0.1; done"
    );
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "cfg", "configMap": {"name": "demo-config"}}],
                "containers": [{"name": "main", "image": "ignored:latest",
                    "command": ["/bin/sh", "-c"], "args": [script],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/demo"}],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}}}
    })
}

struct Harness {
    cp: ControlPlane,
    kubelet: Kubelet,
    deploys: Api<Deployment>,
    pods: Api<Pod>,
    _dir: tempfile::TempDir,
}

async fn harness() -> Harness {
    let cp = ControlPlane::start(Config::default()).await.unwrap();
    let client = cp.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = kubelet::Config::in_dir(dir.path());
    cfg.tick = Duration::from_millis(100);
    cfg.ready_after = Duration::from_millis(300);
    cfg.restart_backoff = Duration::from_millis(200);
    let kubelet = Kubelet::start(client.clone(), cfg).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo-config"}, "data": {"key.txt": "mounted-value"}});
    cms.patch("demo-config", &PatchParams::apply("test"), &Patch::Apply(cm)).await.unwrap();
    Harness {
        deploys: Api::namespaced(client.clone(), "default"),
        pods: Api::namespaced(client, "default"),
        cp,
        kubelet,
        _dir: dir,
    }
}

async fn apply(h: &Harness, body: serde_json::Value) {
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    h.deploys.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(body)).await.unwrap();
}

async fn ready_replicas(h: &Harness, name: &str) -> (i32, i32, Option<i64>) {
    let d = h.deploys.get_status(name).await.unwrap();
    let s = d.status.unwrap_or_default();
    (s.ready_replicas.unwrap_or(0), s.updated_replicas.unwrap_or(0), s.observed_generation)
}

#[tokio::test]
async fn replicas_run_restart_scale_and_roll() {
    let h = harness().await;
    apply(&h, deployment("demo", 3, "hello", false)).await;

    let pods =
        eventually("3 running pods", || async { Some(running(&h.kubelet, "demo")).filter(|p| p.len() == 3) })
            .await;
    eventually("readyReplicas 3", || async {
        (ready_replicas(&h, "demo").await == (3, 3, Some(1))).then_some(())
    })
    .await;
    let first = &pods[0];
    assert!(first.name.starts_with(&format!("demo-{}-", first.template_hash)), "{}", first.name);
    let log = eventually("the greeting in the log", || async {
        std::fs::read_to_string(&first.log).ok().filter(|l| l.contains("mounted-value"))
    })
    .await;
    assert!(log.contains(&format!("hello {} default", first.name)), "{log}");
    let listed = h.pods.list(&ListParams::default().labels("app=demo")).await.unwrap();
    assert_eq!(listed.items.len(), 3, "Pod objects mirror the processes");

    // A crash restarts the same pod.
    let victim = first.clone();
    kill(Pid::from_raw(i32::try_from(victim.pid.unwrap()).unwrap()), Signal::SIGKILL).unwrap();
    eventually("a restart", || async {
        running(&h.kubelet, "demo")
            .into_iter()
            .find(|p| p.name == victim.name && p.restarts >= 1 && p.pid != victim.pid)
    })
    .await;

    // Scale down: surplus pods get SIGTERM and leave.
    apply(&h, deployment("demo", 1, "hello", false)).await;
    eventually("one pod left", || async {
        Some(h.kubelet.pods()).filter(|p| p.iter().filter(|x| x.deployment == "demo").count() == 1)
    })
    .await;
    let stopped: Vec<PodInfo> = pods
        .iter()
        .filter(|p| !running(&h.kubelet, "demo").iter().any(|r| r.name == p.name))
        .cloned()
        .collect();
    assert_eq!(stopped.len(), 2);
    for p in &stopped {
        let log = std::fs::read_to_string(&p.log).unwrap();
        assert!(log.contains("got-term"), "{} did not see SIGTERM: {log}", p.name);
    }
    eventually("readyReplicas 1", || async { (ready_replicas(&h, "demo").await.0 == 1).then_some(()) }).await;

    // A template change rolls the pod: new hash, old one retired after the new one is ready.
    apply(&h, deployment("demo", 1, "bonjour", false)).await;
    let new = eventually("the rolled pod", || async {
        let now = h.kubelet.pods();
        let demo: Vec<_> = now.into_iter().filter(|p| p.deployment == "demo").collect();
        (demo.len() == 1 && demo[0].template_hash != first.template_hash && demo[0].pid.is_some())
            .then(|| demo[0].clone())
    })
    .await;
    eventually("status of the rollout", || async {
        (ready_replicas(&h, "demo").await == (1, 1, Some(3))).then_some(())
    })
    .await;
    let log = eventually("the new greeting", || async {
        std::fs::read_to_string(&new.log).ok().filter(|l| l.contains("bonjour"))
    })
    .await;
    assert!(log.contains(&new.name));

    // Deleting the Deployment stops everything.
    h.deploys.delete("demo", &DeleteParams::default()).await.unwrap();
    eventually("no pods", || async { h.kubelet.pods().is_empty().then_some(()) }).await;
    h.kubelet.shutdown().await;
    h.cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let h = harness().await;
    apply(&h, deployment("stubborn", 1, "hi", true)).await;
    let pod = eventually("the pod", || async { running(&h.kubelet, "stubborn").into_iter().next() }).await;
    eventually("it is ready", || async { (ready_replicas(&h, "stubborn").await.0 == 1).then_some(()) }).await;
    let started = tokio::time::Instant::now();
    apply(&h, deployment("stubborn", 0, "hi", true)).await;
    eventually("the pod gone", || async { h.kubelet.pods().is_empty().then_some(()) }).await;
    assert!(started.elapsed() >= Duration::from_millis(900), "gone before the 1 s grace period");
    let pid = Pid::from_raw(i32::try_from(pod.pid.unwrap()).unwrap());
    assert!(kill(pid, None).is_err(), "the process is dead");
    h.kubelet.shutdown().await;
    h.cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_stops_every_process() {
    let h = harness().await;
    apply(&h, deployment("bye", 2, "hi", false)).await;
    let pods =
        eventually("2 pods", || async { Some(running(&h.kubelet, "bye")).filter(|p| p.len() == 2) }).await;
    h.kubelet.shutdown().await;
    for p in pods {
        let pid = Pid::from_raw(i32::try_from(p.pid.unwrap()).unwrap());
        assert!(kill(pid, None).is_err(), "{} still runs", p.name);
    }
    h.cp.shutdown().await.unwrap();
}

#[tokio::test]
async fn children_die_with_their_pod() {
    let h = harness().await;
    let mut d = deployment("family", 1, "hi", false);
    // The shell leaves a background child that would outlive it without the group kill.
    d["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!(["sleep 300 & echo child $! > child.pid; trap 'exit 0' TERM; while true; do sleep 0.1; done"]);
    apply(&h, d.clone()).await;
    let pod = eventually("the pod", || async { running(&h.kubelet, "family").into_iter().next() }).await;
    let pid_file = pod.log.parent().unwrap().parent().unwrap().join("pods").join(&pod.name).join("child.pid");
    let child: i32 = eventually("the child pid", || async {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().strip_prefix("child ").and_then(|p| p.parse().ok()))
    })
    .await;
    d["spec"]["replicas"] = json!(0);
    apply(&h, d).await;
    eventually("the pod gone", || async { h.kubelet.pods().is_empty().then_some(()) }).await;
    eventually("the child gone", || async { kill(Pid::from_raw(child), None).is_err().then_some(()) }).await;
    h.kubelet.shutdown().await;
    h.cp.shutdown().await.unwrap();
}
