//! The real, unmodified `kubectl` against the test cluster's real API server, as a user of the demo
//! runs it: apply (client-side with validation on, and `--server-side`), explain, get with printer
//! columns, describe with the operator's events, events, pods; `kubectl create configmap` and
//! `kubectl create token` (protobuf bodies); and names, fields and inline credential headers the API
//! server refuses. `kubectl logs` needs a kubelet's log endpoint, which the process kubelet does not
//! serve: the reader's log is read from the file the kubelet writes instead.
//!
//! Needs /usr/bin/kubectl (or `KUBECTL`). Where it is absent the test says so and passes, except under
//! `CI=true`, where the runner must provide it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

/// kubectl with the cluster's kubeconfig, the suite's namespace and its own discovery cache.
struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    cache: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin_file: Option<&Path>) -> Result<Output> {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(["--namespace", &self.namespace])
            .args(args);
        if let Some(file) = stdin_file {
            cmd.stdin(std::fs::File::open(file)?);
        }
        let out = cmd.output().context("running kubectl")?;
        println!(
            "$ kubectl {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out)
    }

    /// Runs a command that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args, None)?;
        if !out.status.success() {
            bail!("kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs a command that must fail; its stderr.
    fn refused(&self, args: &[&str], stdin_file: Option<&Path>) -> Result<String> {
        let out = self.run(args, stdin_file)?;
        if out.status.success() {
            bail!("kubectl {} succeeded, a real API server refuses it", args.join(" "));
        }
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Repeats `args` until `done` holds for its output (bounded), returning that output.
    async fn until(&self, args: &[&str], what: &str, done: impl Fn(&str) -> bool) -> Result<String> {
        poll::until(Duration::from_secs(90), Duration::from_millis(500), || async {
            let out = self.ok(args)?;
            if done(&out) {
                return Ok(Check::Met(out));
            }
            Ok(Check::NotYet(format!("kubectl {}: never showed {what}; last output:\n{out}", args.join(" "))))
        })
        .await
    }
}

/// `kubectl create configmap` and `kubectl create token` (protobuf bodies) work as on a cluster:
/// the ConfigMap holds what was given, and the token authenticates as the ServiceAccount.
async fn kubectl_creates_configmaps_and_tokens(kubectl: &Kubectl, system: &System) -> Result<()> {
    let created = kubectl.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
        "--from-literal=empty=",
    ])?;
    assert!(created.contains("configmap/settings created"), "{created}");
    let data = kubectl.ok(&["get", "configmap", "settings", "-o", "jsonpath={.data}"])?;
    let data: serde_json::Value = serde_json::from_str(&data)?;
    assert_eq!(data, serde_json::json!({"mode": "fast", "empty": ""}));

    let token = kubectl.ok(&["create", "token", "orders-reader", "--duration=10m"])?;
    let token = token.trim();
    assert!(!token.is_empty(), "kubectl create token printed nothing");
    let server = &system.cluster().url;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&system.cluster().ca)?)?;
    let http =
        reqwest::Client::builder().timeout(Duration::from_secs(10)).add_root_certificate(ca).build()?;
    let url = format!("{server}/api/v1/namespaces/{}/configmaps/orders-config", system.namespace);
    let with = http.get(&url).bearer_auth(token).send().await?.status().as_u16();
    let forged = http.get(&url).bearer_auth("sluice-local-forged").send().await?.status().as_u16();
    println!("GET {url}: {with} with the created token, {forged} with a forged one");
    // The readers' ClusterRole, bound in the source's namespace, lets it read its own source's
    // ConfigMaps: authenticated and authorized.
    assert_eq!(with, 200, "the token kubectl created does not authenticate as orders-reader");
    assert_eq!(forged, 401);
    Ok(())
}

/// A user's first manifest: the queue, one http sink, one reader.
fn source_yaml(name: &str, queue: &TestQueue, endpoint: &str, sink: &str) -> String {
    SourceYaml::bare(name, &queue.url, endpoint)
        .sink("webhook", Sink::http(sink))
        .replicas(1, 1)
        .poll_interval(1)
        .yaml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmodified_kubectl_reads_and_writes_the_test_cluster() -> Result<()> {
    let Some(bin) = sluice_tests::kubectl::path() else { return Ok(()) };
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "kubectl", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubectl-cluster");
    let system = System::start_with_operator(&dir).await?;
    let kubectl = Kubectl {
        bin,
        kubeconfig: system.cluster().admin_kubeconfig.clone(),
        namespace: system.namespace.clone(),
        cache: dir.join("kubectl-cache"),
    };

    // apply with validation on (kubectl's default, Strict): the server validates against the CRD.
    let name = "orders";
    let file = dir.join("source.yaml");
    std::fs::write(&file, source_yaml(name, &queue, &endpoint, &sink.url()))?;
    let applied = kubectl.ok(&["apply", "-f", file.to_str().unwrap_or_default()])?;
    assert!(applied.contains("sqssource.sluice.dev/orders created"), "{applied}");
    // Server-side apply of a second source: the API server merges it under kubectl's field manager.
    // (Re-applying `orders` server-side would conflict with the client-side apply's field manager on
    // every field it set, as the real server says; `--force-conflicts` is the documented takeover.)
    let ssa = dir.join("source-ssa.yaml");
    std::fs::write(&ssa, source_yaml("orders-ssa", &queue, &endpoint, &sink.url()))?;
    let applied = kubectl.ok(&["apply", "--server-side", "-f", ssa.to_str().unwrap_or_default()])?;
    assert!(applied.contains("sqssource.sluice.dev/orders-ssa serverside-applied"), "{applied}");
    let conflict =
        kubectl.refused(&["apply", "--server-side", "-f", file.to_str().unwrap_or_default()], None)?;
    assert!(conflict.contains("conflicts with \"kubectl-client-side-apply\""), "{conflict}");

    let explained = kubectl.ok(&["explain", "sqssource.spec.delivery"])?;
    assert!(explained.contains("KIND:       SqsSource"), "{explained}");
    assert!(explained.contains("FIELD: delivery <Object>"), "{explained}");
    assert!(explained.contains("guarantee\t<string>"), "{explained}");

    // Printer columns, GUARANTEE filled by the CRD's default (the manifest does not name it).
    let got = kubectl
        .until(&["get", "sqss"], "READY True", |out| {
            out.lines().any(|l| l.starts_with("orders ") && l.contains(" True "))
        })
        .await?;
    let header: Vec<&str> = got.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DEPTH", "READERS", "GUARANTEE", "HELD", "COMMITTED", "READY", "AGE"]);
    assert!(got.lines().nth(1).is_some_and(|row| row.contains("atLeastOnce")), "{got}");

    let described = kubectl
        .until(&["describe", "sqss", name], "the operator's events", |out| out.contains("ConfigApplied"))
        .await?;
    assert!(described.contains("Events:") && described.contains("sluice-operator"), "{described}");
    let events = kubectl.ok(&["get", "events"])?;
    assert!(events.contains("sqssource/orders") && events.contains("ConfigApplied"), "{events}");

    let pods = kubectl
        .until(&["get", "pods"], "a running reader", |out| {
            out.contains("orders-reader-") && out.contains("1/1")
        })
        .await?;
    assert!(pods.lines().next().is_some_and(|h| h.starts_with("NAME") && h.contains("RESTARTS")), "{pods}");
    let pod =
        pods.lines().find(|l| l.starts_with("orders-reader-")).and_then(|l| l.split_whitespace().next());
    let pod = pod.context("a reader pod row")?;
    let log = system.pod_log(pod);
    poll::until(Duration::from_secs(60), Duration::from_millis(250), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        Ok(Check::met_if(text.contains("reader started"), || {
            format!("{} never said reader started", log.display())
        }))
    })
    .await?;

    // What a real API server refuses: an invalid name, a field the schema does not declare.
    let bad = dir.join("bad-name.yaml");
    std::fs::write(&bad, source_yaml("Orders_Bad", &queue, &endpoint, &sink.url()))?;
    let refused = kubectl.refused(&["apply", "-f", "-"], Some(&bad))?;
    assert!(
        refused.contains(r#"The SqsSource "Orders_Bad" is invalid: metadata.name: Invalid value: "Orders_Bad": a lowercase RFC 1123 subdomain"#),
        "{refused}"
    );
    let typo = dir.join("typo.yaml");
    let mut misspelt: serde_yaml::Value =
        serde_yaml::from_str(&source_yaml("orders", &queue, &endpoint, &sink.url()))?;
    misspelt["spec"]["sinkz"] = serde_yaml::Value::Sequence(Vec::new());
    std::fs::write(&typo, serde_yaml::to_string(&misspelt)?)?;
    let refused = kubectl.refused(&["apply", "-f", typo.to_str().unwrap_or_default()], None)?;
    assert!(refused.contains(r#"strict decoding error: unknown field "spec.sinkz""#), "{refused}");
    // A body over the API server's 3 MiB limit: a Status kubectl can word, not a bare 413.
    let big = dir.join("big.txt");
    std::fs::write(&big, "a".repeat(4 * 1024 * 1024))?;
    let from_file = format!("--from-file={}", big.display());
    let refused = kubectl.refused(&["create", "configmap", "big", &from_file], None)?;
    assert!(refused.contains("Request entity too large: limit is 3145728"), "{refused}");
    // A credential header written inline: refused at apply, pointing at secretRefs.
    let inline = dir.join("inline-token.yaml");
    let mut with_token: serde_yaml::Value =
        serde_yaml::from_str(&source_yaml("orders-inline", &queue, &endpoint, &sink.url()))?;
    with_token["spec"]["sinks"][0]["http"]["headers"] =
        serde_yaml::from_str("{Authorization: Bearer t0ken}")?;
    std::fs::write(&inline, serde_yaml::to_string(&with_token)?)?;
    let refused = kubectl.refused(&["apply", "-f", inline.to_str().unwrap_or_default()], None)?;
    assert!(
        refused.contains("spec.sinks[0].http.headers")
            && refused.contains("spec.sinks[].http.secretRefs.headers"),
        "{refused}"
    );

    // Imperative creates of built-in kinds: kubectl sends these bodies as protobuf.
    kubectl_creates_configmaps_and_tokens(&kubectl, &system).await?;

    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
