//! End-to-end, as separate processes: LocalStack, the local control plane with its process runner, the
//! operator, and reader processes per Deployment replica. A user's `kubectl apply` of an SqsSource must
//! turn into readers that deliver every message, through rollouts (a spec change, a new IRSA role on the
//! readers' ServiceAccount), reader kills, an operator restart, and the source's deletion; children
//! deleted or edited by another writer are restored.
//!
//! Each scenario counts at a real HTTP sink on 127.0.0.1 (distinct CloudEvents ids) and at the queue
//! (empty at the end): at-least-once means every message arrives, none is lost, duplicates are allowed
//! and printed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::scrape::metric;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

/// A source with `replicas` fixed readers (min = max), short visibility so killed readers' messages
/// come back soon.
fn source_yaml(name: &str, s: &Scenario, replicas: i32, pollers: u32) -> String {
    SourceYaml::new(name, &s.queue.url, &s.endpoint)
        .pollers(pollers)
        .visibility_timeout(5)
        .sink("webhook", Sink::http(&s.sink.url()).timeout_ms(2000))
        .replicas(replicas, replicas)
        .yaml()
}

struct Scenario {
    system: System,
    queue: TestQueue,
    sink: SinkServer,
    endpoint: String,
}

async fn scenario(prefix: &str) -> Result<Scenario> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(5), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, prefix, false, &options).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let system = System::start_with_operator(&Path::new(env!("CARGO_TARGET_TMPDIR")).join(prefix)).await?;
    Ok(Scenario { system, queue, sink, endpoint })
}

impl Scenario {
    /// Waits until the sink has seen `n` distinct messages and the queue is empty.
    async fn expect_all_delivered(&self, n: u64, timeout: Duration) -> Result<()> {
        let stats = self
            .sink
            .wait_for_distinct(n, timeout)
            .await
            .map_err(|e| anyhow::anyhow!("{e}; logs under {}", self.system.state_dir().display()))?;
        poll::until(Duration::from_secs(60), Duration::from_millis(500), || async {
            let counts = self.queue.approximate_counts().await?;
            Ok(Check::met_if(counts.total() == 0, || format!("queue not empty after delivery: {counts:?}")))
        })
        .await?;
        println!(
            "delivered {} distinct, {} duplicates, {} requests",
            stats.distinct, stats.duplicates, stats.accepted
        );
        assert!(stats.distinct >= n, "lost messages: {} of {n}", stats.distinct);
        Ok(())
    }

    async fn finish(self) -> Result<()> {
        drop(self.system);
        self.sink.stop().await?;
        self.queue.delete().await?;
        Ok(())
    }
}

/// The data of the register of reader accounts in the sources' namespace (`sluice-readers`).
async fn registered_readers(system: &System) -> Result<std::collections::BTreeMap<String, String>> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::default_namespaced(system.client.clone());
    Ok(api.get_opt("sluice-readers").await?.and_then(|c| c.data).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_starts_readers_that_deliver_5000_messages_then_delete_removes_everything() -> Result<()> {
    let s = scenario("e2e-apply").await?;
    s.system.apply_source(&source_yaml("orders", &s, 2, 2)).await?;
    s.system.wait_ready_readers("orders", 2, Duration::from_secs(60)).await?;
    println!("readers running: {}", s.system.running_readers("orders").len());
    // The readers' account is in the namespace's register, the reader policy's parameter.
    let registered = registered_readers(&s.system).await?;
    println!("sluice-readers: {registered:?}");
    assert_eq!(registered.get("orders-reader").map(String::as_str), Some("orders"), "{registered:?}");
    s.queue.send_batch(5000).await?;
    s.expect_all_delivered(5000, Duration::from_secs(180)).await?;

    s.system.delete_source("orders").await?;
    poll::until(Duration::from_secs(60), Duration::from_millis(250), || async {
        let gone = s.system.reader_deployment("orders").await?.is_none();
        let processes = s.system.running_readers("orders").len();
        let unregistered = !registered_readers(&s.system).await?.contains_key("orders-reader");
        Ok(Check::met_if(gone && processes == 0 && unregistered, || {
            format!(
                "after deleting the source: deployment gone={gone}, reader processes={processes}, \
                 account unregistered={unregistered}"
            )
        }))
    })
    .await?;
    s.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_rolls_the_readers_without_loss() -> Result<()> {
    let s = scenario("e2e-roll").await?;
    s.system.apply_source(&source_yaml("roll", &s, 2, 2)).await?;
    s.system.wait_ready_readers("roll", 2, Duration::from_secs(60)).await?;
    let before: Vec<String> = s.system.running_readers("roll").into_iter().map(|p| p.name).collect();
    s.queue.send_batch(2000).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A different pollers count changes the rendered config, hence the pod template hash: a rollout.
    s.system.apply_source(&source_yaml("roll", &s, 2, 3)).await?;
    s.queue.send_batch(2000).await?;
    s.expect_all_delivered(4000, Duration::from_secs(180)).await?;
    // The Deployment controller replaces the readers a few at a time (its rolling update waits for
    // each new pod's readiness): the roll may still be finishing when the last message lands.
    let after = poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let after: Vec<String> = s.system.alive_readers("roll").into_iter().map(|p| p.name).collect();
        let rolled = after.len() == 2 && after.iter().all(|p| !before.contains(p));
        Ok(if rolled {
            Check::Met(after)
        } else {
            Check::NotYet(format!("readers not rolled: before {before:?}, now {after:?}"))
        })
    })
    .await?;
    println!("rolled: before {before:?}, after {after:?}");
    s.finish().await
}

/// `source_yaml` with `spec.reader.serviceAccount.annotations` naming an IRSA role.
fn with_role(yaml: &str, role: &str) -> Result<String> {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(yaml)?;
    let arn = format!("arn:aws:iam::123456789012:role/{role}");
    doc["spec"]["reader"]["serviceAccount"] =
        serde_yaml::from_str(&format!("{{annotations: {{eks.amazonaws.com/role-arn: \"{arn}\"}}}}"))?;
    Ok(serde_yaml::to_string(&doc)?)
}

/// The reader Deployment's `sluice.dev/service-account-hash`.
async fn account_hash(system: &System, source: &str) -> Result<Option<String>> {
    let deployment = system.reader_deployment(source).await?;
    let template = deployment.and_then(|d| d.spec).and_then(|s| s.template.metadata);
    Ok(template.and_then(|m| m.annotations).and_then(|a| a.get("sluice.dev/service-account-hash").cloned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_irsa_role_rolls_the_readers_without_loss() -> Result<()> {
    let s = scenario("e2e-irsa").await?;
    s.system.apply_source(&with_role(&source_yaml("irsa", &s, 2, 2), "orders-v1")?).await?;
    s.system.wait_ready_readers("irsa", 2, Duration::from_secs(60)).await?;
    let hash_before = account_hash(&s.system, "irsa").await?.expect("the template carries the account hash");
    let before: Vec<String> = s.system.running_readers("irsa").into_iter().map(|p| p.name).collect();
    s.queue.send_batch(1000).await?;
    // Only the ServiceAccount's annotation changes: the rendered config (and its hash) stay the same.
    s.system.apply_source(&with_role(&source_yaml("irsa", &s, 2, 2), "orders-v2")?).await?;
    let hash_after = poll::until(Duration::from_secs(60), Duration::from_millis(250), || async {
        let now = account_hash(&s.system, "irsa").await?;
        Ok(match now {
            Some(h) if h != hash_before => Check::Met(h),
            other => Check::NotYet(format!("the pod template's account hash is still {other:?}")),
        })
    })
    .await?;
    println!("service-account hash {hash_before} -> {hash_after}");
    s.queue.send_batch(1000).await?;
    s.expect_all_delivered(2000, Duration::from_secs(180)).await?;
    poll::until(Duration::from_secs(90), Duration::from_millis(500), || async {
        let after: Vec<String> = s.system.running_readers("irsa").into_iter().map(|p| p.name).collect();
        let rolled = after.len() == 2 && after.iter().all(|p| !before.contains(p));
        Ok(Check::met_if(rolled, || format!("readers not rolled: before {before:?}, now {after:?}")))
    })
    .await?;
    println!(
        "readers before {before:?}, after the role change {:?}",
        s.system.running_readers("irsa").into_iter().map(|p| p.name).collect::<Vec<_>>()
    );
    s.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_killed_repeatedly_and_an_operator_restart_lose_nothing() -> Result<()> {
    let mut s = scenario("e2e-kill").await?;
    s.system.apply_source(&source_yaml("kill", &s, 2, 2)).await?;
    s.system.wait_ready_readers("kill", 2, Duration::from_secs(60)).await?;
    s.queue.send_batch(3000).await?;
    let mut kills = 0;
    for round in 0..4 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if let Some(victim) = s.system.running_readers("kill").into_iter().next() {
            let pid = victim.pid.expect("running readers have a pid");
            kill(Pid::from_raw(pid as i32), Signal::SIGKILL)?;
            kills += 1;
            println!("round {round}: SIGKILLed reader {} (pid {pid})", victim.name);
        }
        if round == 1 {
            s.system.stop_operator(Signal::SIGKILL)?;
            s.queue.send_batch(1000).await?;
            s.system.start_operator()?;
            println!("operator killed and restarted");
        }
    }
    assert!(kills >= 3, "too few readers were running to kill");
    s.expect_all_delivered(4000, Duration::from_secs(240)).await?;
    let restarts: u64 = s.system.reader_processes().iter().map(|p| p.restarts).sum();
    println!("reader restarts seen by the runner: {restarts}");
    s.finish().await
}

/// `sluice_operator_reconciles_total` now, from the operator's `/metrics`.
async fn reconciles(system: &System, http: &reqwest::Client) -> Result<f64> {
    let addr =
        system.operator_admin_addr("operator-1").context("the operator has not said where it listens")?;
    let text = http.get(format!("http://{addr}/metrics")).send().await?.text().await?;
    metric(&text, "sluice_operator_reconciles_total").context("no sluice_operator_reconciles_total")
}

/// The operator drops the watch events of its own writes to the children (so they start no
/// reconcile), but a child another writer deletes or edits is still restored within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_deleted_or_edited_by_others_are_restored() -> Result<()> {
    /// The source's binding of the readers' ClusterRole.
    const BINDING: &str = "restore-sluice-reader";
    let s = scenario("e2e-restore").await?;
    let http = reqwest::Client::new();
    s.system.apply_source(&source_yaml("restore", &s, 1, 1)).await?;
    s.system.wait_ready_readers("restore", 1, Duration::from_secs(60)).await?;
    println!("reconciles from the apply to a ready reader: {}", reconciles(&s.system, &http).await?);

    let config_maps: Api<ConfigMap> = Api::default_namespaced(s.system.client.clone());
    config_maps.delete("restore-config", &DeleteParams::default()).await?;
    let bindings: Api<RoleBinding> = Api::default_namespaced(s.system.client.clone());
    let stray = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    let unbind = serde_json::json!({ "subjects": [] });
    bindings.patch(BINDING, &stray, &Patch::Merge(&unbind)).await?;
    let started = Instant::now();
    poll::until(Duration::from_secs(30), Duration::from_millis(200), || async {
        let config = config_maps.get_opt("restore-config").await?.and_then(|c| c.data);
        let subjects = bindings.get(BINDING).await?.subjects.unwrap_or_default();
        Ok(Check::met_if(config.is_some() && !subjects.is_empty(), || {
            format!(
                "not restored yet: restore-config {}, {BINDING} {} subjects",
                if config.is_some() { "back" } else { "missing" },
                subjects.len()
            )
        }))
    })
    .await?;
    println!(
        "deleted ConfigMap and emptied RoleBinding restored in {:.1} s; reconciles now {}",
        started.elapsed().as_secs_f64(),
        reconciles(&s.system, &http).await?
    );

    // The operator skips applies of children as it last applied them; an edit of the Deployment's
    // spec, and a second edit of a child it has restored once, must still bring its apply back.
    let deployments: Api<Deployment> = Api::default_namespaced(s.system.client.clone());
    let hash_of = |d: &Deployment| {
        let template = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
        template.and_then(|m| m.annotations.as_ref()).and_then(|a| a.get("sluice.dev/config-hash")).cloned()
    };
    let hash = hash_of(&deployments.get("restore-reader").await?);
    let tamper = serde_json::json!({ "spec": { "template": { "metadata": { "annotations": {
        "sluice.dev/config-hash": "tampered" } } } } });
    deployments.patch("restore-reader", &stray, &Patch::Merge(tamper)).await?;
    bindings.patch(BINDING, &stray, &Patch::Merge(&unbind)).await?;
    let started = Instant::now();
    poll::until(Duration::from_secs(30), Duration::from_millis(200), || async {
        let now = hash_of(&deployments.get("restore-reader").await?);
        let subjects = bindings.get(BINDING).await?.subjects.unwrap_or_default();
        Ok(Check::met_if(now == hash && !subjects.is_empty(), || {
            format!(
                "not restored yet: config hash {now:?} (want {hash:?}), {BINDING} {} subjects",
                subjects.len()
            )
        }))
    })
    .await?;
    println!(
        "edited Deployment template and the RoleBinding emptied again restored in {:.1} s; reconciles now {}",
        started.elapsed().as_secs_f64(),
        reconciles(&s.system, &http).await?
    );
    s.finish().await
}
