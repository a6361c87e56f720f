//! The supervision loop: pods bound to this node in, processes out, status back.
//!
//! Pods come from a kube-runtime reflector over `spec.nodeName=<node>` (list + watch, as a kubelet's
//! pod source). Every tick the loop starts what is new, restarts what crashed (with a doubling
//! back-off, keeping the pod: a container restart), probes, stops what is being deleted (SIGTERM,
//! SIGKILL after the grace period, then the final delete a kubelet issues), kills what vanished, and
//! writes each pod's status when it changes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::probe::{self, Prober, Verdict};
use super::process::Process;
use super::status::{self, ContainerView};
use super::template::{PodIdentity, PodPlan, plan, resolve_program, rewrite_listen_addr, rewrite_mounts};
use super::volumes::{self, ApiEndpoint};
use super::{Config, PodInfo, node, now};

/// `(namespace, name)` of a pod.
type Key = (String, String);

/// One pod on this node.
struct LocalPod {
    identity: PodIdentity,
    plan: Result<PodPlan, String>,
    owner: String,
    dir: PathBuf,
    log: PathBuf,
    /// Container port → loopback port.
    ports: BTreeMap<i32, u16>,
    process: Option<Process>,
    view: ContainerView,
    restart_at: Option<Instant>,
    /// Set once SIGTERM was sent: the SIGKILL deadline.
    kill_at: Option<Instant>,
    /// Not to be started again (completed under its restart policy).
    finished: bool,
    readiness: Option<Prober>,
    liveness: Option<Prober>,
    /// The status last written, to write only changes.
    written: Option<serde_json::Value>,
}

pub(super) struct Runner {
    client: kube::Client,
    config: Config,
    pods: BTreeMap<Key, LocalPod>,
    shared: Arc<Mutex<Vec<PodInfo>>>,
    http: reqwest::Client,
}

impl Runner {
    pub(super) fn new(client: kube::Client, config: Config, shared: Arc<Mutex<Vec<PodInfo>>>) -> Self {
        let http = reqwest::Client::builder().no_proxy().build().unwrap_or_default();
        Self { client, config, pods: BTreeMap::new(), shared, http }
    }

    pub(super) async fn run(mut self, stop: CancellationToken) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let selector = format!("spec.nodeName={}", self.config.node_name);
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default().fields(&selector)))
            .default_backoff()
            .applied_objects();
        let watch = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Err(error) = event {
                    tracing::warn!(error = %error, "pod watch failed; retrying with back-off");
                }
            }
        });
        let mut tick = tokio::time::interval(self.config.tick);
        let mut lease_at = Instant::now();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            if lease_at <= Instant::now() {
                match node::renew_lease(&self.client, &self.config.node_name).await {
                    Ok(()) => lease_at = Instant::now() + node::LEASE_RENEW,
                    Err(error) => {
                        tracing::warn!(error = %error, "could not renew the node's Lease; retrying in 1 s");
                        lease_at = Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            if store.wait_until_ready().await.is_ok() {
                self.sync(&store).await;
            }
            self.publish();
        }
        watch.abort();
        self.shutdown().await;
    }

    async fn sync(&mut self, store: &Store<Pod>) {
        let bound: BTreeMap<Key, Arc<Pod>> = store
            .state()
            .into_iter()
            .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
            .collect();
        // Vanished (deleted with grace 0 by someone else, or the node unbound): kill at once.
        let gone: Vec<Key> = self.pods.keys().filter(|k| !bound.contains_key(*k)).cloned().collect();
        for key in gone {
            if let Some(mut pod) = self.pods.remove(&key)
                && let Some(mut process) = pod.process.take()
            {
                process.kill();
            }
        }
        for (key, object) in &bound {
            let phase = object.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let known = self.pods.contains_key(key);
            if !known
                && object.metadata.deletion_timestamp.is_none()
                && phase != "Succeeded"
                && phase != "Failed"
            {
                self.pods.insert(key.clone(), self.adopt(object));
            }
        }
        let keys: Vec<Key> = self.pods.keys().cloned().collect();
        for key in keys {
            let Some(object) = bound.get(&key) else { continue };
            if object.uid().as_deref() != Some(self.pods[&key].identity.uid.as_str()) {
                // Same name, new pod (a StatefulSet would do this): start over.
                if let Some(mut old) = self.pods.remove(&key)
                    && let Some(mut p) = old.process.take()
                {
                    p.kill();
                }
                continue;
            }
            if object.metadata.deletion_timestamp.is_some() {
                let grace = object.metadata.deletion_grace_period_seconds;
                if self.terminate(&key, grace).await {
                    self.pods.remove(&key);
                }
                continue;
            }
            self.supervise(&key).await;
            self.probe(&key).await;
            self.write_status(&key).await;
        }
    }

    fn adopt(&self, object: &Pod) -> LocalPod {
        let ns = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let plan = plan(object);
        let ports = plan
            .as_ref()
            .map(|p| {
                p.ports.iter().filter_map(|c| Some((*c, crate::controlplane::free_port().ok()?))).collect()
            })
            .unwrap_or_default();
        let owner = owner_deployment(object);
        let (container, image) =
            plan.as_ref().map(|p| (p.container.clone(), p.image.clone())).unwrap_or_default();
        LocalPod {
            identity: PodIdentity {
                name: name.clone(),
                namespace: ns.clone(),
                uid: object.uid().unwrap_or_default(),
                node: self.config.node_name.clone(),
                service_account: plan.as_ref().map(|p| p.service_account.clone()).unwrap_or_default(),
                labels: object.labels().clone(),
                annotations: object.annotations().clone(),
            },
            owner,
            dir: self.config.dir.join("pods").join(format!("{ns}_{name}")),
            log: self.config.dir.join("logs").join(format!("{ns}_{name}.log")),
            ports,
            process: None,
            view: ContainerView { name: container, image, pod_started: now(), ..ContainerView::default() },
            restart_at: Some(Instant::now()),
            kill_at: None,
            finished: false,
            readiness: None,
            liveness: None,
            written: None,
            plan,
        }
    }

    /// Starts, reaps and restarts the container of one pod.
    async fn supervise(&mut self, key: &Key) {
        let backoff = (self.config.restart_backoff, self.config.max_backoff);
        let pod = self.pods.get_mut(key).expect("supervised pods are known");
        if let Some(process) = pod.process.as_mut() {
            if pod.kill_at.is_some_and(|at| Instant::now() >= at) {
                Process::note(&pod.log, super::SIGKILL_NOTE);
                process.kill();
                pod.kill_at = Some(Instant::now() + Duration::from_secs(3600));
            }
            let Some(exit) = process.try_exit() else { return };
            pod.process = None;
            pod.kill_at = None;
            let code = exit.code().unwrap_or(137);
            let reason = if code == 0 { "Completed" } else { "Error" };
            pod.view.last_exit = Some((code, reason.to_owned(), now()));
            pod.view.running_since = None;
            pod.view.ready = false;
            let policy = pod.plan.as_ref().map(|p| p.restart_policy.clone()).unwrap_or_default();
            if policy == "Never" || (policy == "OnFailure" && code == 0) {
                pod.finished = true;
                pod.view.waiting = None;
                return;
            }
            pod.view.restarts += 1;
            let delay =
                backoff.0.saturating_mul(1 << pod.view.restarts.min(10).saturating_sub(1)).min(backoff.1);
            pod.restart_at = Some(Instant::now() + delay);
            pod.view.waiting = Some((
                "CrashLoopBackOff".to_owned(),
                format!("back-off {} s restarting failed container", delay.as_secs()),
            ));
            tracing::info!(pod = %key.1, namespace = %key.0, code, restarts = pod.view.restarts, "container exited; restarting after back-off");
            return;
        }
        if pod.finished || pod.restart_at.is_none_or(|at| Instant::now() < at) {
            return;
        }
        match start(&self.client, &self.config, pod).await {
            Ok(process) => {
                let started = process.started;
                pod.process = Some(process);
                pod.restart_at = None;
                pod.view.running_since = Some(now());
                pod.view.waiting = None;
                let plan = pod.plan.as_ref().ok();
                let prober = |spec: Option<&super::template::ProbeSpec>| {
                    let spec = spec?.clone();
                    let port = *pod.ports.get(&spec.port)?;
                    Some(Prober::new(spec, port, started))
                };
                pod.readiness = prober(plan.and_then(|p| p.readiness.as_ref()));
                pod.liveness = prober(plan.and_then(|p| p.liveness.as_ref()));
            }
            Err(error) => {
                let reason =
                    if pod.plan.is_err() { "CreateContainerConfigError" } else { "ContainerCreating" };
                let message = format!("{error:#}");
                if pod.view.waiting.as_ref().is_none_or(|(_, m)| *m != message) {
                    tracing::warn!(pod = %key.1, namespace = %key.0, error = %message, "cannot start the container yet; retrying in 1 s");
                }
                pod.view.waiting = Some((reason.to_owned(), message));
                pod.restart_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Runs the probes that are due; a failing liveness probe restarts the container.
    async fn probe(&mut self, key: &Key) {
        let http = self.http.clone();
        let pod = self.pods.get_mut(key).expect("probed pods are known");
        if pod.process.is_none() || pod.kill_at.is_some() {
            return;
        }
        let now_ = Instant::now();
        match pod.readiness.as_mut() {
            Some(p) if p.due(now_) => {
                let passed = probe::run(&http, &p.spec, p.host_port).await;
                match p.record(passed, Instant::now()) {
                    Verdict::Passing => pod.view.ready = true,
                    Verdict::Failing => pod.view.ready = false,
                    Verdict::Undecided => {}
                }
            }
            Some(_) => {}
            None => pod.view.ready = true,
        }
        if let Some(p) = pod.liveness.as_mut()
            && p.due(now_)
        {
            let passed = probe::run(&http, &p.spec, p.host_port).await;
            if p.record(passed, Instant::now()) == Verdict::Failing {
                tracing::warn!(pod = %key.1, namespace = %key.0, "liveness probe failed; restarting the container");
                let grace = pod.plan.as_ref().map_or(30, |p| p.grace_seconds);
                if let Some(process) = pod.process.as_ref() {
                    process.terminate();
                }
                pod.kill_at = Some(Instant::now() + Duration::from_secs(grace));
                pod.view.ready = false;
            }
        }
    }

    /// Stops a pod being deleted: SIGTERM, SIGKILL after its grace, then the final delete. True once
    /// the pod is gone from the API.
    async fn terminate(&mut self, key: &Key, grace: Option<i64>) -> bool {
        let pod = self.pods.get_mut(key).expect("terminated pods are known");
        if let Some(process) = pod.process.as_mut() {
            if pod.kill_at.is_none() {
                let default = pod.plan.as_ref().map_or(30, |p| p.grace_seconds);
                let grace = grace.map_or(default, |g| u64::try_from(g).unwrap_or(0));
                process.terminate();
                pod.kill_at = Some(Instant::now() + Duration::from_secs(grace));
                pod.view.ready = false;
            } else if pod.kill_at.is_some_and(|at| Instant::now() >= at) {
                Process::note(&pod.log, super::SIGKILL_NOTE);
                process.kill();
                pod.kill_at = Some(Instant::now() + Duration::from_secs(3600));
            }
            if let Some(exit) = process.try_exit() {
                pod.view.last_exit = Some((exit.code().unwrap_or(137), "Completed".to_owned(), now()));
                pod.process = None;
            } else {
                return false;
            }
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.0);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod.identity.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&key.1, &params).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
            Err(error) => {
                tracing::warn!(pod = %key.1, error = %error, "could not delete the stopped pod; retrying");
                false
            }
        }
    }

    async fn write_status(&mut self, key: &Key) {
        let pod = self.pods.get_mut(key).expect("known");
        let policy =
            pod.plan.as_ref().map(|p| p.restart_policy.clone()).unwrap_or_else(|_| "Always".to_owned());
        let status = status::render(&pod.view, &policy, "");
        if pod.written.as_ref() == Some(&status) {
            return;
        }
        let mut stamped = status.clone();
        let at = now();
        if let Some(conditions) = stamped["conditions"].as_array_mut() {
            for c in conditions {
                c["lastTransitionTime"] = json!(at);
            }
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.0);
        match api
            .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(json!({"status": stamped})))
            .await
        {
            Ok(_) => pod.written = Some(status),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => {
                tracing::warn!(pod = %key.1, error = %error, "could not write the pod's status; retrying")
            }
        }
    }

    fn publish(&self) {
        let infos: Vec<PodInfo> = self
            .pods
            .values()
            .map(|p| PodInfo {
                name: p.identity.name.clone(),
                namespace: p.identity.namespace.clone(),
                deployment: p.owner.clone(),
                uid: p.identity.uid.clone(),
                pid: p.process.as_ref().and_then(Process::pid),
                restarts: p.view.restarts,
                terminating: p.kill_at.is_some(),
                ready: p.view.ready,
                last_exit: p.view.last_exit.as_ref().map(|(code, ..)| format!("exit status: {code}")),
                log: p.log.clone(),
                ports: p.ports.clone(),
            })
            .collect();
        if let Some(path) = &self.config.pods_file {
            let tmp = path.with_extension("json.tmp");
            if let Ok(text) = serde_json::to_vec_pretty(&infos)
                && std::fs::write(&tmp, text).is_ok()
            {
                let _ = std::fs::rename(&tmp, path);
            }
        }
        *self.shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = infos;
    }

    /// Stops every process within its grace period, as a node draining on shutdown.
    async fn shutdown(&mut self) {
        for pod in self.pods.values_mut() {
            if let Some(p) = pod.process.as_ref() {
                p.terminate();
                let grace = pod.plan.as_ref().map_or(30, |p| p.grace_seconds);
                pod.kill_at = Some(Instant::now() + Duration::from_secs(grace));
            }
        }
        loop {
            let mut alive = 0;
            for pod in self.pods.values_mut() {
                let Some(process) = pod.process.as_mut() else { continue };
                if pod.kill_at.is_some_and(|at| Instant::now() >= at) {
                    process.kill();
                }
                if process.try_exit().is_some() {
                    pod.process = None;
                } else {
                    alive += 1;
                }
            }
            if alive == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.publish();
    }
}

/// Prepares the pod's files and env and spawns its process.
async fn start(client: &kube::Client, config: &Config, pod: &LocalPod) -> anyhow::Result<Process> {
    let plan = pod.plan.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::create_dir_all(&pod.dir)?;
    let api = ApiEndpoint { url: &config.api_url, ca: &config.ca };
    let materialized = volumes::materialize(client, &pod.identity, plan, &pod.dir, &api).await?;
    let mut env: Vec<(String, String)> = config.pod_env.clone();
    env.extend(volumes::resolve_env(client, &pod.identity, plan, &materialized.mounts).await?);
    env = env.into_iter().map(|(k, v)| (k, rewrite_listen_addr(&v, &pod.ports))).collect();
    if let Some(kubeconfig) = &materialized.kubeconfig
        && !env.iter().any(|(k, _)| k == "KUBECONFIG")
    {
        env.push(("KUBECONFIG".to_owned(), kubeconfig.display().to_string()));
    }
    let args: Vec<String> = plan
        .args
        .iter()
        .map(|a| rewrite_listen_addr(&rewrite_mounts(a, &materialized.mounts), &pod.ports))
        .collect();
    let program = resolve_program(&plan.program, config.bin_dir.as_deref());
    Ok(Process::spawn(&program, &args, &env, &pod.dir, &pod.log)?)
}

/// The Deployment a pod belongs to: its ReplicaSet owner's name less the template hash, or the owner's
/// name, or the pod's own.
fn owner_deployment(pod: &Pod) -> String {
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()));
    match owner {
        Some((kind, name)) if kind == "ReplicaSet" => {
            let hash = pod.labels().get("pod-template-hash").cloned().unwrap_or_default();
            name.strip_suffix(&format!("-{hash}")).unwrap_or(&name).to_owned()
        }
        Some((_, name)) => name,
        None => pod.name_any(),
    }
}
