//! The kind suite's scenarios (`tests/kind/scenarios.sh`) on the test command's real control plane:
//! the same script, unchanged, that `tests/kind/run.sh` runs on kind. The operator is deployed as a
//! user deploys it, `kubectl apply -f deploy/crds/` and `kubectl apply -k` of an overlay of
//! `deploy/kustomize/`, and runs as a pod (the process kubelet maps its image to the binaries just
//! built). The script then applies a source, checks the reader pods' spec, delivers to an output
//! queue, rolls the readers, force-deletes them while the operator restarts, and deletes the source.
//! The checks only a container runtime can pass (an image, `kubectl logs`) are skipped by name, with
//! the reason printed.
//!
//! A private cluster: the kustomize base installs cluster-scoped objects with fixed names (the
//! ClusterRole and ClusterRoleBinding `sluice-operator`, the reader policy) and an operator that
//! serves every namespace, which in the shared cluster would reconcile the other suites' sources;
//! scenario 3 also restarts it.
//!
//! Needs /usr/bin/kubectl (or `KUBECTL`), as `kubectl_cluster` does; it says so and passes where it
//! is absent, except under `CI=true`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use sluice_tests::cluster::{Cluster, Options};
use sluice_tests::localstack::{LocalStack, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::system::{aws_test_env, bin_dir};

/// Small counts: the script's defaults (5000, 2000, 3000 at 100/s, deletion rounds 5 s apart) are
/// kind's; these keep the scenarios near a minute and a half and still send through the roll and the
/// deletion rounds (400 at 30/s span the first three rounds and the operator's restart).
const SCENARIO_ENV: [(&str, &str); 5] = [
    ("MESSAGES", "200"),
    ("ROLL_MESSAGES", "300"),
    ("CHAOS_MESSAGES", "400"),
    ("SEND_RATE", "30"),
    ("ROUND_SECONDS", "3"),
];

/// Why the runtime checks cannot run here, printed on each SKIP line.
const NO_RUNTIME: &str = "the process kubelet runs pods as processes: no image, no container log endpoint";

/// Every check the script must pass here, by the start of its PASS line.
const EXPECTED_PASSES: [&str; 18] = [
    "operator Deployment sluice-system/sluice-operator rolled out",
    "operator PodDisruptionBudget and Service installed",
    "scenario 1: readers Ready",
    "scenario 1: reader pod spec shaped from spec.reader",
    "scenario 1: no AWS_ROLE_ARN on the reader",
    "scenario 1: readers' PodDisruptionBudget",
    "scenario 1: kubectl get sluice lists the source",
    "scenario 1: output queue received",
    "scenario 1: source queue empty",
    "scenario 2: config-hash changed",
    "scenario 2: rollout completed",
    "scenario 2: output queue received",
    "scenario 2: source queue empty",
    "scenario 3: operator restarted",
    "scenario 3: readers Ready",
    "scenario 3: output queue received",
    "scenario 3: source queue empty",
    "scenario 4: Deployment, ConfigMaps, ServiceAccount, RoleBinding, PodDisruptionBudget and pods gone",
];

/// The operator from the kustomize base with the settings kind's overlay uses
/// (`tests/kind/operator-settings`), less the image (the process kubelet runs `command`). Paths are
/// relative to the overlay: kustomize refuses absolute ones.
fn overlay(base: &Path, settings: &Path) -> String {
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {}
components:
  - {}
",
        base.display(),
        settings.display()
    )
}

/// Runs kubectl with the cluster's admin kubeconfig and a discovery cache of the test's own.
fn kubectl(bin: &Path, kubeconfig: &Path, cache: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(bin)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
        .args(args)
        .output()
        .context("running kubectl")?;
    println!(
        "$ kubectl {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// What the script printed and how it ended.
struct Run {
    lines: Vec<String>,
    success: bool,
    code: Option<i32>,
}

impl Run {
    fn with_prefix(&self, prefix: &str) -> Vec<&str> {
        self.lines.iter().filter_map(|l| l.strip_prefix(prefix)).collect()
    }
}

/// Runs scenarios.sh, echoing its output as it comes, bounded by `timeout` (which ends the script's
/// whole process group: its kubectl and sluice-dev children too).
fn run_scenarios(env: &[(String, String)]) -> Result<Run> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kind/scenarios.sh");
    let mut child = Command::new("timeout")
        .args(["--kill-after=15", "900", "bash"])
        .arg(&script)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting tests/kind/scenarios.sh")?;
    let stdout = child.stdout.take().context("the script's stdout")?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    Ok(Run { lines, success: status.success(), code: status.code() })
}

/// The queue URLs the script logged (`source queue URL`, `output queue URL`), to delete afterwards.
fn logged_queues(run: &Run) -> Vec<String> {
    run.lines
        .iter()
        .filter_map(|l| l.split_once("] source queue ").or_else(|| l.split_once("] output queue ")))
        .map(|(_, url)| url.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_scenarios_run_on_the_real_control_plane() -> Result<()> {
    let Some(kubectl_bin) = sluice_tests::kubectl::path() else { return Ok(()) };
    let started = Instant::now();
    let endpoint = LocalStack::ensure().await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kind-scenarios");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("overlay"))?;
    let pod_env = aws_test_env().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let options = Options { bin_dir: Some(bin_dir()), pod_env, bare: true, ..Options::default() };
    let cluster = Cluster::start(&dir.join("cluster"), options).await?;
    let admin = cluster.info.admin_kubeconfig.clone();
    let cache = dir.join("kube-cache");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize()?;

    // As tests/kind/run.sh deploys: the CRD, then the operator through an overlay of the base.
    let overlay_dir = dir.join("overlay").canonicalize()?;
    let base = relative(&overlay_dir, &repo.join("deploy/kustomize"));
    let settings = relative(&overlay_dir, &repo.join("tests/kind/operator-settings"));
    std::fs::write(overlay_dir.join("kustomization.yaml"), overlay(&base, &settings))?;
    let crds = repo.join("deploy/crds");
    let k = |args: &[&str]| kubectl(&kubectl_bin, &admin, &cache, args);
    k(&["apply", "-f", crds.to_str().unwrap_or_default()])?;
    // kubectl wait fails at once (".status.conditions accessor error") while the new CRD has no
    // status yet: try again, as tests/kind/run.sh does.
    poll::until(Duration::from_secs(60), Duration::from_secs(1), || async {
        let wait = ["wait", "--for=condition=Established", "crd/sqssources.sluice.dev", "--timeout=30s"];
        Ok(match k(&wait) {
            Ok(()) => Check::Met(()),
            Err(e) => Check::NotYet(format!("{e:#}")),
        })
    })
    .await?;
    k(&["apply", "-k", overlay_dir.to_str().unwrap_or_default()])?;
    let deployed = started.elapsed();

    let mut env: Vec<(String, String)> = vec![
        ("KUBECONFIG".into(), admin.display().to_string()),
        ("KUBECACHEDIR".into(), cache.display().to_string()),
        ("PATH".into(), path_with_kubectl(&kubectl_bin)),
        ("NAMESPACE".into(), "kind-scenarios".into()),
        ("SQS_ENDPOINT".into(), endpoint.clone()),
        ("POD_SQS_ENDPOINT".into(), endpoint.clone()),
        ("OPERATOR_NAMESPACE".into(), "sluice-system".into()),
        ("OPERATOR_DEPLOYMENT".into(), "sluice-operator".into()),
        ("SLUICE_DEV".into(), env!("CARGO_BIN_EXE_sluice-dev").into()),
        ("SKIP_RUNTIME_CHECKS".into(), NO_RUNTIME.into()),
        ("LOGS_DIR".into(), cluster.info.logs_dir.display().to_string()),
    ];
    env.extend(SCENARIO_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let run = run_scenarios(&env)?;
    let sqs = sqs_client(&endpoint);
    for url in logged_queues(&run) {
        sqs.delete_queue().queue_url(&url).send().await.with_context(|| format!("deleting {url}"))?;
    }
    cluster.shutdown().await;

    let status = run.code.map_or_else(|| "none (ended by a signal)".to_owned(), |c| c.to_string());
    let (passes, fails, skips) =
        (run.with_prefix("PASS: "), run.with_prefix("FAIL: "), run.with_prefix("SKIP: "));
    println!(
        "scenarios.sh: {} PASS, {} FAIL, {} SKIP, exit status {}; cluster up and operator applied in {:.1} s, \
         wall time {:.1} s",
        passes.len(),
        fails.len(),
        skips.len(),
        status,
        deployed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(fails.is_empty(), "checks failed:\n{}", fails.join("\n"));
    assert!(run.success, "scenarios.sh exited with status {status}");
    for want in EXPECTED_PASSES {
        assert!(
            passes.iter().any(|p| p.starts_with(want)),
            "no PASS line starting '{want}'; passed:\n{}",
            passes.join("\n")
        );
    }
    assert_eq!(skips.len(), 2, "exactly the two runtime checks are skipped; skipped:\n{}", skips.join("\n"));
    assert!(
        skips.iter().all(|s| s.ends_with(&format!("({NO_RUNTIME})"))),
        "a SKIP without the reason:\n{}",
        skips.join("\n")
    );
    Ok(())
}

/// `to` as seen from `from` (both canonical): up to their common ancestor, then down.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let common = from.components().zip(to.components()).take_while(|(a, b)| a == b).count();
    let ups = from.components().count() - common;
    std::iter::repeat_n(Path::new(".."), ups)
        .chain(to.components().skip(common).map(|c| Path::new(c.as_os_str())))
        .collect()
}

/// PATH with the chosen kubectl's directory first, so the script runs the same kubectl.
fn path_with_kubectl(kubectl: &Path) -> String {
    let dir = kubectl.parent().map(|d| d.display().to_string()).unwrap_or_default();
    format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
}
