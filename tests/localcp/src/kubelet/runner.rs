//! The supervision loop: Deployments in, processes out, status back.
//!
//! Deployments come from a kube-runtime reflector (list + watch), so the runner exercises the control
//! plane the way any controller does. Every tick it decides starts and stops per Deployment
//! ([`super::plan::decide`]), reaps exited processes and schedules restarts with exponential backoff
//! (a crash keeps the pod name, as a container restart does), escalates SIGTERM to SIGKILL after
//! `terminationGracePeriodSeconds`, and writes each Deployment's status when its figures change.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::{PodView, counts, decide};
use super::process::Process;
use super::template::{
    PodIdentity, PodPlan, plan, resolve_env, resolve_program, rewrite_listen_addr, rewrite_mounts,
};
use super::{Config, PodInfo, podobject, serviceaccount, volumes};
use crate::controlplane::clock::random_suffix;

/// `(namespace, name)` of a Deployment.
type Key = (String, String);

/// One pod: a process (or a pending restart) started from one template.
struct LocalPod {
    name: String,
    namespace: String,
    deployment: String,
    plan: Arc<PodPlan>,
    uid: String,
    dir: PathBuf,
    log: PathBuf,
    process: Option<Process>,
    restarts: u32,
    restart_at: Option<Instant>,
    /// Set when SIGTERM was sent: the SIGKILL deadline.
    kill_at: Option<Instant>,
    last_exit: Option<String>,
}

impl LocalPod {
    fn view(&self, ready_after: Duration) -> PodView {
        PodView {
            name: self.name.clone(),
            hash: self.plan.hash.clone(),
            ready: self.process.as_ref().is_some_and(|p| p.started.elapsed() >= ready_after),
            terminating: self.kill_at.is_some(),
        }
    }
}

/// The runner's state.
pub(super) struct Runner {
    client: kube::Client,
    config: Config,
    pods: BTreeMap<Key, Vec<LocalPod>>,
    written: BTreeMap<Key, serde_json::Value>,
    warned: BTreeMap<Key, String>,
    snapshot: Arc<Mutex<Vec<PodInfo>>>,
}

impl Runner {
    pub(super) fn new(client: kube::Client, config: Config, snapshot: Arc<Mutex<Vec<PodInfo>>>) -> Self {
        Self {
            client,
            config,
            pods: BTreeMap::new(),
            written: BTreeMap::new(),
            warned: BTreeMap::new(),
            snapshot,
        }
    }

    /// Runs until `stop` is cancelled, then stops every process within its grace period.
    pub(super) async fn run(mut self, stop: CancellationToken) {
        let api: Api<Deployment> = match &self.config.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let (reader, writer) = reflector::store();
        let watch = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "deployment watch error (retrying)");
                }
            });
        let watch_task = tokio::spawn(watch);
        let mut tick = tokio::time::interval(self.config.tick);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => self.tick(&reader, false).await,
            }
        }
        watch_task.abort();
        self.stop_all().await;
    }

    async fn tick(&mut self, deployments: &Store<Deployment>, stopping: bool) {
        let mut wanted: BTreeMap<Key, Arc<Deployment>> = BTreeMap::new();
        if !stopping {
            for d in deployments.state() {
                wanted.insert((d.namespace().unwrap_or_default(), d.name_any()), d);
            }
        }
        for (key, d) in &wanted {
            self.reconcile(key, d).await;
        }
        let gone: Vec<Key> = self.pods.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
        for key in gone {
            let names: Vec<String> = self.pods[&key].iter().map(|p| p.name.clone()).collect();
            self.terminate(&key, &names);
        }
        self.supervise(&wanted).await;
        for (key, d) in &wanted {
            self.write_status(key, d).await;
        }
        self.publish();
    }

    async fn reconcile(&mut self, key: &Key, d: &Deployment) {
        let plan = match plan(d) {
            Ok(p) => Arc::new(p),
            Err(msg) => {
                if self.warned.get(key) != Some(&msg) {
                    tracing::warn!(deployment = %key.1, namespace = %key.0, "cannot run: {msg}");
                    self.warned.insert(key.clone(), msg);
                }
                return;
            }
        };
        let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let desired = usize::try_from(desired).unwrap_or(0);
        let views: Vec<PodView> =
            self.pods.get(key).into_iter().flatten().map(|p| p.view(self.config.ready_after)).collect();
        let actions = decide(desired, &plan.hash, &views);
        self.terminate(key, &actions.stop);
        for _ in 0..actions.start {
            let name = format!("{}-{}-{}", key.1, plan.hash, random_suffix(5));
            let uid = if self.config.pod_objects {
                podobject::create(&self.client, d, &plan, &name).await
            } else {
                String::new()
            };
            let pod = LocalPod {
                dir: self.config.run_dir.join(&name),
                log: self.config.log_dir.join(format!("{name}.log")),
                name,
                namespace: key.0.clone(),
                deployment: key.1.clone(),
                plan: Arc::clone(&plan),
                uid,
                process: None,
                restarts: 0,
                restart_at: Some(Instant::now()),
                kill_at: None,
                last_exit: None,
            };
            self.pods.entry(key.clone()).or_default().push(pod);
        }
    }

    /// Sends SIGTERM to the named pods; pods without a process are dropped at once.
    fn terminate(&mut self, key: &Key, names: &[String]) {
        let Some(pods) = self.pods.get_mut(key) else { return };
        let now = Instant::now();
        for p in pods.iter_mut().filter(|p| names.contains(&p.name) && p.kill_at.is_none()) {
            p.kill_at = Some(now + Duration::from_secs(p.plan.grace_seconds));
            p.restart_at = None;
            if let Some(proc) = &p.process {
                tracing::info!(pod = %p.name, "stopping (SIGTERM)");
                proc.terminate();
            }
        }
    }

    /// Reaps, restarts, escalates to SIGKILL, and forgets pods whose process has stopped for good.
    async fn supervise(&mut self, wanted: &BTreeMap<Key, Arc<Deployment>>) {
        let now = Instant::now();
        let mut finished: Vec<(String, String)> = Vec::new();
        for pods in self.pods.values_mut() {
            for p in pods.iter_mut() {
                if let Some(proc) = p.process.as_mut()
                    && let Some(status) = proc.try_exit()
                {
                    p.last_exit = Some(status.to_string());
                    p.process = None;
                    if p.kill_at.is_none() {
                        p.restarts += 1;
                        let delay = backoff(self.config.restart_backoff, self.config.max_backoff, p.restarts);
                        tracing::warn!(pod = %p.name, %status, restarts = p.restarts, ?delay, "process exited; restarting");
                        p.restart_at = Some(now + delay);
                    }
                }
                if let (Some(deadline), Some(proc)) = (p.kill_at, p.process.as_mut())
                    && now >= deadline
                {
                    tracing::warn!(pod = %p.name, "grace period over (SIGKILL)");
                    proc.kill();
                }
                if p.kill_at.is_some() && p.process.is_none() {
                    finished.push((p.namespace.clone(), p.name.clone()));
                }
            }
        }
        for pods in self.pods.values_mut() {
            pods.retain(|p| !(p.kill_at.is_some() && p.process.is_none()));
        }
        self.pods.retain(|_, pods| !pods.is_empty());
        if self.config.pod_objects {
            for (ns, name) in finished {
                podobject::delete(&self.client, &ns, &name).await;
            }
        }
        let due: Vec<(Key, usize)> = self
            .pods
            .iter()
            .flat_map(|(k, pods)| {
                pods.iter()
                    .enumerate()
                    .filter(|(_, p)| {
                        p.process.is_none() && p.kill_at.is_none() && p.restart_at.is_some_and(|t| t <= now)
                    })
                    .map(move |(i, _)| (k.clone(), i))
            })
            .collect();
        for (key, i) in due {
            if wanted.contains_key(&key) {
                self.start(&key, i).await;
            }
        }
    }

    async fn start(&mut self, key: &Key, index: usize) {
        let client = self.client.clone();
        let bin_dir = self.config.bin_dir.clone();
        let api_url = self.config.api_url.clone();
        let Some(p) = self.pods.get_mut(key).and_then(|pods| pods.get_mut(index)) else { return };
        let mounts = match volumes::materialize(&client, &p.namespace, &p.plan.config_maps, &p.dir).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(pod = %p.name, error = %e, "volumes not ready; will retry");
                p.restart_at = Some(Instant::now() + Duration::from_secs(1));
                return;
            }
        };
        let mut env_extra = Vec::new();
        if let Some(url) = &api_url {
            if p.plan.automount_token {
                let who = serviceaccount::Binding {
                    namespace: &p.namespace,
                    service_account: &p.plan.service_account,
                    pod: &p.name,
                    pod_uid: &p.uid,
                };
                if let Err(e) = serviceaccount::mount(&client, url, &who, &p.dir).await {
                    tracing::warn!(pod = %p.name, error = %e, "no ServiceAccount token yet; will retry");
                    p.restart_at = Some(Instant::now() + Duration::from_secs(1));
                    return;
                }
            }
            let kubeconfig = serviceaccount::kubeconfig_path(&p.dir);
            env_extra.push(("KUBECONFIG".to_owned(), kubeconfig.to_string_lossy().into_owned()));
        }
        let identity = PodIdentity {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            uid: p.uid.clone(),
            service_account: p.plan.service_account.clone(),
        };
        let mut env = resolve_env(&p.plan, &identity, &mounts);
        env.extend(env_extra);
        let args: Vec<String> =
            p.plan.args.iter().map(|a| rewrite_listen_addr(&rewrite_mounts(a, &mounts))).collect();
        let program = resolve_program(&p.plan.program, bin_dir.as_deref());
        if let Err(e) = std::fs::create_dir_all(&p.dir) {
            tracing::warn!(pod = %p.name, error = %e, "cannot create the pod directory");
        }
        match Process::spawn(&program, &args, &env, &p.dir, &p.log) {
            Ok(proc) => {
                tracing::info!(pod = %p.name, pid = ?proc.pid(), program = %program.display(), "started");
                p.process = Some(proc);
                p.restart_at = None;
            }
            Err(e) => {
                p.restarts += 1;
                let delay = backoff(self.config.restart_backoff, self.config.max_backoff, p.restarts);
                tracing::warn!(pod = %p.name, error = %e, program = %program.display(), "cannot start; retrying");
                p.last_exit = Some(format!("spawn failed: {e}"));
                p.restart_at = Some(Instant::now() + delay);
            }
        }
    }

    async fn write_status(&mut self, key: &Key, d: &Deployment) {
        let Ok(plan) = plan(d) else { return };
        let views: Vec<PodView> =
            self.pods.get(key).into_iter().flatten().map(|p| p.view(self.config.ready_after)).collect();
        let c = counts(&plan.hash, &views);
        let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let available = if c.ready >= desired { "True" } else { "False" };
        let status = json!({
            "observedGeneration": d.metadata.generation,
            "replicas": c.replicas,
            "updatedReplicas": c.updated,
            "readyReplicas": c.ready,
            "availableReplicas": c.ready,
            "unavailableReplicas": (desired - c.ready).max(0),
            "conditions": [{"type": "Available", "status": available, "reason": "LocalKubelet"}],
        });
        if self.written.get(key) == Some(&status) {
            return;
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &key.0);
        match api
            .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
        {
            Ok(_) => {
                self.written.insert(key.clone(), status);
            }
            Err(e) => tracing::debug!(deployment = %key.1, error = %e, "status write failed (will retry)"),
        }
    }

    fn publish(&self) {
        let infos: Vec<PodInfo> = self
            .pods
            .values()
            .flatten()
            .map(|p| PodInfo {
                name: p.name.clone(),
                namespace: p.namespace.clone(),
                deployment: p.deployment.clone(),
                template_hash: p.plan.hash.clone(),
                pid: p.process.as_ref().and_then(Process::pid),
                restarts: p.restarts,
                terminating: p.kill_at.is_some(),
                last_exit: p.last_exit.clone(),
                log: p.log.clone(),
            })
            .collect();
        if let Some(path) = &self.config.pods_file
            && let Ok(text) = serde_json::to_vec_pretty(&infos)
        {
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
        *self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = infos;
    }

    /// Stops every process (SIGTERM, SIGKILL after the grace period), bounded by the longest grace.
    async fn stop_all(&mut self) {
        let keys: Vec<Key> = self.pods.keys().cloned().collect();
        for key in &keys {
            let names: Vec<String> = self.pods[key].iter().map(|p| p.name.clone()).collect();
            self.terminate(key, &names);
        }
        let longest = self.pods.values().flatten().map(|p| p.plan.grace_seconds).max().unwrap_or(0);
        let give_up = Instant::now() + Duration::from_secs(longest + 5);
        while !self.pods.is_empty() && Instant::now() < give_up {
            self.supervise(&BTreeMap::new()).await;
            self.publish();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `base * 2^(n-1)`, capped at `max`.
fn backoff(base: Duration, max: Duration, restarts: u32) -> Duration {
    let factor = 2_u32.saturating_pow(restarts.saturating_sub(1).min(16));
    base.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert_eq!(backoff(b, m, 1), b);
        assert_eq!(backoff(b, m, 3), Duration::from_millis(400));
        assert_eq!(backoff(b, m, 30), m);
    }
}
