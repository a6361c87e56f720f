//! The API server's audit log, as a counter of who asked what: the one honest count of a client's
//! list calls (the API server's `apiserver_request_total` has no user label).
//!
//! The policy records only reads that matter to the watch suites (`list` and `watch`, at
//! `Metadata` level; a watch when it starts and when it ends) so that the log stays small; a suite that
//! wants it passes [`AuditLog::apiserver_args`] in `Tuning::apiserver_args`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// Records lists and watches, nothing else.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["list", "watch"]
  - level: None
"#;

/// Where the policy and the log of one control plane are.
#[derive(Debug, Clone)]
pub struct AuditLog {
    pub policy: PathBuf,
    pub log: PathBuf,
}

impl AuditLog {
    /// Writes the policy into `dir` (made if missing); the log will be `dir/audit.log`.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let dir = std::path::absolute(dir)?;
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(&policy, POLICY).with_context(|| format!("writing {}", policy.display()))?;
        Ok(Self { policy, log: dir.join("audit.log") })
    }

    /// The API server's flags for it.
    pub fn apiserver_args(&self) -> Vec<String> {
        vec![
            format!("--audit-policy-file={}", self.policy.display()),
            format!("--audit-log-path={}", self.log.display()),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
        ]
    }

    /// Every event in the log so far (a line that does not parse, the one being written, is skipped).
    pub fn events(&self) -> Result<Vec<Event>> {
        let text =
            std::fs::read_to_string(&self.log).with_context(|| format!("reading {}", self.log.display()))?;
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }
}

/// One audit event, the fields the suites count by.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub verb: String,
    /// `ResponseStarted` (a watch begins) or `ResponseComplete`.
    pub stage: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub user: User,
    /// RFC 3339 with microseconds.
    pub request_received_timestamp: String,
    #[serde(default)]
    pub response_status: Option<Status>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub username: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub code: Option<u16>,
}

impl Event {
    /// When the API server received the request (the epoch if the field does not parse).
    pub fn received(&self) -> Timestamp {
        self.request_received_timestamp.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// What one client's list or watch asked for: the path and the query without the paging and
    /// position parameters (`continue`, `resourceVersion` of a watch, `timeoutSeconds`...), so
    /// that each reflector of a client has one key of its own.
    pub fn request_key(&self) -> String {
        let (path, query) = self.request_uri.split_once('?').unwrap_or((&self.request_uri, ""));
        let kept: Vec<&str> = query
            .split('&')
            .filter(|p| {
                let name = p.split('=').next().unwrap_or_default();
                matches!(name, "labelSelector" | "fieldSelector" | "limit")
                    || (name == "resourceVersion" && self.verb == "list")
            })
            .collect();
        if kept.is_empty() { path.to_owned() } else { format!("{path}?{}", kept.join("&")) }
    }
}

/// Counts of `verb` calls per (user, request key) among `events` received in `[from, to)`.
pub fn count(
    events: &[Event],
    verb: &str,
    from: Timestamp,
    to: Timestamp,
) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    for event in events.iter().filter(|e| e.verb == verb) {
        let received = event.received();
        if received >= from && received < to {
            *counts.entry((event.user.username.clone(), event.request_key())).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(verb: &str, uri: &str) -> Event {
        let stage = if verb == "watch" { "ResponseStarted" } else { "ResponseComplete" };
        serde_json::from_value(serde_json::json!({
            "verb": verb, "stage": stage, "requestURI": uri, "user": {"username": "u"},
            "requestReceivedTimestamp": "2026-12-06T05:00:00.123456Z",
            "responseStatus": {"code": 200},
        }))
        .unwrap()
    }

    #[test]
    fn each_reflector_has_a_key_of_its_own_and_paging_is_left_out() {
        let list =
            event("list", "/apis/sluice.dev/v1alpha1/namespaces/n/sqssources?limit=500&resourceVersion=0");
        assert_eq!(
            list.request_key(),
            "/apis/sluice.dev/v1alpha1/namespaces/n/sqssources?limit=500&resourceVersion=0"
        );
        let page =
            event("list", "/api/v1/namespaces/n/configmaps?continue=abc&labelSelector=a%3Db&limit=500");
        assert_eq!(page.request_key(), "/api/v1/namespaces/n/configmaps?labelSelector=a%3Db&limit=500");
        let watch =
            event("watch", "/api/v1/namespaces/n/configmaps?resourceVersion=7&timeoutSeconds=290&watch=true");
        assert_eq!(watch.request_key(), "/api/v1/namespaces/n/configmaps");
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let counted =
            count(&[list, page, watch], "list", t("2026-12-06T05:00:00Z"), t("2026-12-06T05:00:01Z"));
        assert_eq!(counted.values().sum::<u64>(), 2);
    }
}
