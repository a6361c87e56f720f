//! Rollout decisions and status counts, as pure functions of the pods a Deployment has.
//!
//! The runner plays both the Deployment controller and the kubelet, so this is where "how many pods of
//! which template" is decided. Rollouts are maxSurge-style with an unbounded surge: every pod of the new
//! template starts at once, and an old pod is stopped only when a new one is ready to replace it, so the
//! number of ready pods never drops below the desired count during a template change (maxUnavailable 0).

/// What the decision needs to know about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Template hash it was started from.
    pub hash: String,
    /// Running long enough to count as ready.
    pub ready: bool,
    /// Already being stopped.
    pub terminating: bool,
}

/// What to do next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    /// Pods of the current template to start.
    pub start: usize,
    /// Pods to stop (SIGTERM, then SIGKILL after the grace period).
    pub stop: Vec<String>,
}

/// Decides starts and stops for `desired` replicas of template `hash`. `pods` are in start order.
pub fn decide(desired: usize, hash: &str, pods: &[PodView]) -> Actions {
    let live: Vec<&PodView> = pods.iter().filter(|p| !p.terminating).collect();
    let current: Vec<&PodView> = live.iter().copied().filter(|p| p.hash == hash).collect();
    let old: Vec<&PodView> = live.iter().copied().filter(|p| p.hash != hash).collect();
    let mut actions = Actions { start: desired.saturating_sub(current.len()), stop: Vec::new() };
    // Surplus of the current template: stop the newest (least likely to hold work for long).
    if current.len() > desired {
        actions.stop.extend(current.iter().rev().take(current.len() - desired).map(|p| p.name.clone()));
    }
    // Old pods go as new ones become ready; unready old ones go first, then the oldest.
    let ready_new = current.iter().filter(|p| p.ready).count().min(desired);
    let removable = (ready_new + old.len()).saturating_sub(desired).min(old.len());
    let mut old_sorted = old;
    old_sorted.sort_by_key(|p| p.ready);
    actions.stop.extend(old_sorted.iter().take(removable).map(|p| p.name.clone()));
    actions
}

/// Figures for `Deployment.status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods not being stopped.
    pub replicas: i32,
    /// Of those, on the current template.
    pub updated: i32,
    /// Of those, ready.
    pub ready: i32,
}

/// Counts pods for the status.
pub fn counts(hash: &str, pods: &[PodView]) -> Counts {
    let live = pods.iter().filter(|p| !p.terminating);
    let n = |it: usize| i32::try_from(it).unwrap_or(i32::MAX);
    Counts {
        replicas: n(live.clone().count()),
        updated: n(live.clone().filter(|p| p.hash == hash).count()),
        ready: n(live.filter(|p| p.ready).count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, hash: &str, ready: bool) -> PodView {
        PodView { name: name.into(), hash: hash.into(), ready, terminating: false }
    }

    #[test]
    fn scales_up_and_down() {
        assert_eq!(decide(3, "h", &[pod("a", "h", true)]).start, 2);
        let a = decide(1, "h", &[pod("a", "h", true), pod("b", "h", true), pod("c", "h", false)]);
        assert_eq!(a, Actions { start: 0, stop: vec!["c".into(), "b".into()] });
        assert_eq!(decide(0, "h", &[pod("a", "h", true)]).stop, vec!["a"]);
    }

    #[test]
    fn rolls_by_surging_then_retiring_old_pods() {
        let old = [pod("o1", "old", true), pod("o2", "old", true)];
        let a = decide(2, "new", &old);
        assert_eq!(a, Actions { start: 2, stop: vec![] }, "nothing stops before new pods are ready");
        let mid =
            [pod("o1", "old", true), pod("o2", "old", true), pod("n1", "new", true), pod("n2", "new", false)];
        assert_eq!(decide(2, "new", &mid).stop, vec!["o1"]);
        let done = [pod("o2", "old", true), pod("n1", "new", true), pod("n2", "new", true)];
        assert_eq!(decide(2, "new", &done).stop, vec!["o2"]);
    }

    #[test]
    fn terminating_pods_are_neither_counted_nor_stopped_again() {
        let mut t = pod("t", "h", true);
        t.terminating = true;
        let pods = [t, pod("a", "h", true)];
        assert_eq!(decide(2, "h", &pods).start, 1);
        assert_eq!(counts("h", &pods), Counts { replicas: 1, updated: 1, ready: 1 });
    }
}
