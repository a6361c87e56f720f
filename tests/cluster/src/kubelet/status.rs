//! A pod's status as a kubelet reports it: pure, from what the node knows of its container.
//!
//! The fields are the ones controllers and people read: `phase`, the `Ready` / `ContainersReady` /
//! `Initialized` / `PodScheduled` conditions (the ReplicaSet and Deployment controllers count ready
//! replicas from `Ready`), `podIP` / `hostIP` (loopback: the pods share the node's network), and one
//! container status with its state, readiness, `restartCount` and last termination.

use serde_json::{Value, json};

/// What the node knows of the pod's (first) container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    /// RFC 3339 time the current process started, while it runs.
    pub running_since: Option<String>,
    /// Why it does not run, while it does not (`ContainerCreating`, `CrashLoopBackOff`, ...).
    pub waiting: Option<(String, String)>,
    /// The last run's end: exit code, reason (`Completed`, `Error`), finished at.
    pub last_exit: Option<(i32, String, String)>,
    pub ready: bool,
    pub restarts: u32,
    /// The pod's start time (first time the node took it).
    pub pod_started: String,
}

/// The pod phase for a container under `restart_policy`.
pub fn phase(view: &ContainerView, restart_policy: &str) -> &'static str {
    if view.running_since.is_some() {
        return "Running";
    }
    match (&view.last_exit, restart_policy) {
        (Some((0, ..)), "Never" | "OnFailure") if view.waiting.is_none() => "Succeeded",
        (Some(_), "Never") if view.waiting.is_none() => "Failed",
        _ => "Pending",
    }
}

/// The `status` object to write.
pub fn render(view: &ContainerView, restart_policy: &str, now: &str) -> Value {
    let condition = |kind: &str, ok: bool| json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now});
    let state = match (&view.running_since, &view.waiting, &view.last_exit) {
        (Some(since), ..) => json!({"running": {"startedAt": since}}),
        (None, Some((reason, message)), _) => json!({"waiting": {"reason": reason, "message": message}}),
        (None, None, Some((code, reason, at))) => {
            json!({"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}})
        }
        (None, None, None) => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    let last_state = match (view.running_since.is_some() || view.waiting.is_some(), &view.last_exit) {
        (true, Some((code, reason, at))) => {
            json!({"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}})
        }
        _ => json!({}),
    };
    json!({
        "phase": phase(view, restart_policy),
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": view.pod_started,
        "conditions": [
            condition("PodScheduled", true),
            condition("Initialized", true),
            condition("ContainersReady", view.ready),
            condition("Ready", view.ready),
        ],
        "containerStatuses": [{
            "name": view.name,
            "image": view.image,
            "imageID": "",
            "ready": view.ready,
            "started": view.running_since.is_some(),
            "restartCount": view.restarts,
            "state": state,
            "lastState": last_state,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ContainerView {
        ContainerView {
            name: "reader".into(),
            image: "img".into(),
            pod_started: "t0".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_running_ready_container_makes_a_ready_running_pod() {
        let v = ContainerView { running_since: Some("t1".into()), ready: true, restarts: 2, ..view() };
        let s = render(&v, "Always", "t2");
        assert_eq!(s["phase"], "Running");
        assert_eq!(
            s["conditions"][3],
            json!({"type": "Ready", "status": "True", "lastTransitionTime": "t2"})
        );
        assert_eq!(s["containerStatuses"][0]["restartCount"], 2);
        assert_eq!(s["containerStatuses"][0]["state"]["running"]["startedAt"], "t1");
    }

    #[test]
    fn a_crash_shows_as_back_off_with_the_last_termination() {
        let v = ContainerView {
            waiting: Some(("CrashLoopBackOff".into(), "back-off 2s".into())),
            last_exit: Some((1, "Error".into(), "t1".into())),
            restarts: 1,
            ..view()
        };
        let s = render(&v, "Always", "t2");
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["containerStatuses"][0]["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(s["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(s["conditions"][3]["status"], "False");
    }

    #[test]
    fn phases_follow_the_restart_policy() {
        let done = ContainerView { last_exit: Some((0, "Completed".into(), "t".into())), ..view() };
        assert_eq!(phase(&done, "Never"), "Succeeded");
        assert_eq!(phase(&done, "Always"), "Pending");
        let failed = ContainerView { last_exit: Some((2, "Error".into(), "t".into())), ..view() };
        assert_eq!(phase(&failed, "Never"), "Failed");
        assert_eq!(phase(&failed, "OnFailure"), "Pending");
    }
}
