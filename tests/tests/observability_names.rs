//! The dashboard and the alert rules name only metrics that the binaries export, with the labels
//! they query. A panel or alert on a misspelt or renamed metric shows nothing and never fires, and
//! nothing else would tell.
//!
//! As separate processes: LocalStack, the local control plane with its process runner, the operator
//! and one reader of an exactlyOnce source (so the checkpoint coordinator's series exist too) that
//! delivers to a real HTTP sink. The test sends a few messages, scrapes the reader and the operator
//! on their admin ports until every name that `deploy/observability/dashboard.json` and
//! `deploy/observability/prometheusrule.yaml` use is there, and fails naming what is missing.
//!
//! Labels the scrape adds (`namespace`, `source` and `pod` on reader series, from
//! `deploy/monitoring/podmonitor.yaml`) are not the reader's to export; every other label a query
//! matches on or aggregates by must be on the series.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::scrape::address_in_log;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;

const SOURCE: &str = "observed";
const MESSAGES: usize = 20;
/// Until every series exists: the operator's first scaler poll, a reconcile, and a committed
/// checkpoint barrier (epochs of 1 s) come within seconds on an idle machine.
const WITHIN: Duration = Duration::from_secs(120);
/// Labels the PodMonitor's relabelings add to every reader series.
const SCRAPE_LABELS: [&str; 3] = ["namespace", "source", "pod"];

fn bin_dir() -> PathBuf {
    sluice_tests::system::bin_dir()
}

fn repo_file(path: &str) -> Result<String> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).with_context(|| format!("reading {}", full.display()))
}

/// One exactlyOnce reader (so the checkpoint families have series) into the HTTP sink, with a
/// filter every message matches (so the filter's families have series).
fn source(queue: &TestQueue, endpoint: &str, sink: &str) -> SourceYaml {
    SourceYaml::new(SOURCE, &queue.url, endpoint)
        .visibility_timeout(30)
        .exactly_once(1)
        .sink("webhook", Sink::http(sink).timeout_ms(2000))
        .replicas(1, 1)
        // Every message matches: the filter's series exist and delivery is as without it.
        .filter_deleting("size(messageId) > 0")
}

/// A metric a query names, and the labels it matches on or aggregates by.
#[derive(Debug, Default)]
struct Wanted {
    labels: BTreeSet<String>,
    /// Where it is used, for the failure message.
    used_in: BTreeSet<String>,
}

/// Every `sluice_*` metric in `expr` with its own matchers' labels and the `by (...)` labels of
/// the expression (each metric of an expression must carry those, or the aggregation loses them).
fn names_in(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut by = BTreeSet::new();
    for part in expr.split(" by ").skip(1) {
        if let Some(list) = part.trim_start().strip_prefix('(').and_then(|p| p.split(')').next()) {
            by.extend(list.split(',').map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()));
        }
    }
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sluice_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let name = &tail[..end];
        let mut labels = by.clone();
        if let Some(matchers) = tail[end..].strip_prefix('{').and_then(|m| m.split('}').next()) {
            for matcher in matchers.split(',') {
                let label = matcher.split(['=', '!', '~']).next().unwrap_or("").trim();
                if !label.is_empty() {
                    labels.insert(label.to_owned());
                }
            }
        }
        found.push((name.to_owned(), labels));
        rest = &tail[end..];
    }
    found
}

/// The expressions of the dashboard's panels and variables, each with where it is.
fn dashboard_exprs(json: &str) -> Result<Vec<(String, String)>> {
    let dashboard: serde_json::Value = serde_json::from_str(json)?;
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push((
                    format!("dashboard panel {:?}", panel["title"].as_str().unwrap_or("")),
                    expr.into(),
                ));
            }
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(query) = variable["definition"].as_str() {
            out.push((
                format!("dashboard variable {:?}", variable["name"].as_str().unwrap_or("")),
                query.into(),
            ));
        }
    }
    Ok(out)
}

/// The expressions of the PrometheusRule's alerts.
fn rule_exprs(yaml: &str) -> Result<Vec<(String, String)>> {
    let rule: serde_yaml::Value = serde_yaml::from_str(yaml)?;
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().into_iter().flatten() {
        for r in group["rules"].as_sequence().into_iter().flatten() {
            if let Some(expr) = r["expr"].as_str() {
                out.push((format!("alert {}", r["alert"].as_str().unwrap_or("")), expr.into()));
            }
        }
    }
    Ok(out)
}

fn wanted() -> Result<BTreeMap<String, Wanted>> {
    let mut exprs = dashboard_exprs(&repo_file("deploy/observability/dashboard.json")?)?;
    exprs.extend(rule_exprs(&repo_file("deploy/observability/prometheusrule.yaml")?)?);
    let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
    for (place, expr) in &exprs {
        for (name, mut labels) in names_in(expr) {
            if name.starts_with("sluice_reader_") {
                labels.retain(|l| !SCRAPE_LABELS.contains(&l.as_str()));
            }
            let entry = wanted.entry(name).or_default();
            entry.labels.extend(labels);
            entry.used_in.insert(place.clone());
        }
    }
    Ok(wanted)
}

/// Label names of every sample in a Prometheus text exposition, by sample name.
fn samples(text: &str) -> BTreeMap<String, Vec<BTreeSet<String>>> {
    let mut out: BTreeMap<String, Vec<BTreeSet<String>>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (series, _value) = line.rsplit_once(' ').unwrap_or((line, ""));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest
                    .trim_end_matches('}')
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.trim().to_owned()))
                    .collect();
                (name, labels)
            }
            None => (series, BTreeSet::new()),
        };
        out.entry(name.to_owned()).or_default().push(labels);
    }
    out
}

/// What is missing: a name no sample has, or labels no sample of that name carries.
fn missing(
    wanted: &BTreeMap<String, Wanted>,
    scraped: &BTreeMap<String, Vec<BTreeSet<String>>>,
) -> Vec<String> {
    wanted
        .iter()
        .filter_map(|(name, w)| match scraped.get(name) {
            None => Some(format!("{name} (used by {:?}) is not exported", w.used_in)),
            Some(series) if !series.iter().any(|labels| w.labels.is_subset(labels)) => Some(format!(
                "{name} (used by {:?}) has no series with labels {:?}; exported: {:?}",
                w.used_in, w.labels, series
            )),
            Some(_) => None,
        })
        .collect()
}

/// The names a reader of METRICS.md looks for, from the `# TYPE` lines of a scrape: a counter's
/// samples end in `_total` and an info metric's in `_info`, as its table lists them.
fn exported_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| match kind.trim() {
            "counter" if !name.ends_with("_total") => format!("{name}_total"),
            "info" => format!("{name}_info"),
            _ => name.to_owned(),
        })
        .collect()
}

/// Every metric family the reader and the operator registered (empty ones included: their
/// `# TYPE` line is there before the first sample) has a row in METRICS.md.
fn every_exported_metric_is_documented(text: &str) -> Result<()> {
    let doc = repo_file("METRICS.md")?;
    let names = exported_names(text);
    let undocumented: Vec<&String> = names.iter().filter(|n| !doc.contains(&format!("`{n}`"))).collect();
    if !undocumented.is_empty() {
        bail!("exported but not in METRICS.md (add a row to its table): {undocumented:?}");
    }
    println!("{} metric families exported by the reader and the operator, all in METRICS.md", names.len());
    Ok(())
}

async fn scrape(http: &reqwest::Client, addr: &str) -> String {
    match http.get(format!("http://{addr}/metrics")).send().await {
        Ok(answer) => answer.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

#[test]
fn type_lines_give_the_documented_names() {
    let text = "# TYPE sluice_reader_deleted_messages counter\n# TYPE sluice_reader_ready gauge\n\
                # TYPE sluice_operator_build info\nsluice_reader_ready 1\n";
    let names: Vec<String> = exported_names(text).into_iter().collect();
    assert_eq!(
        names,
        ["sluice_operator_build_info", "sluice_reader_deleted_messages_total", "sluice_reader_ready"]
    );
}

#[test]
fn expressions_are_parsed_into_names_and_labels() {
    let found = names_in(
        r#"histogram_quantile(0.9, sum by (le, queue) (rate(sluice_reader_x_bucket{namespace="$namespace"}[5m]))) and sluice_operator_y > 1"#,
    );
    let labels = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(found[0], ("sluice_reader_x_bucket".to_owned(), labels(&["le", "queue", "namespace"])));
    assert_eq!(found[1], ("sluice_operator_y".to_owned(), labels(&["le", "queue"])));
    let scraped = samples("# TYPE a counter\na_total{queue=\"q\",le=\"1\"} 3\nb 1\n");
    assert_eq!(scraped["a_total"], vec![labels(&["queue", "le"])]);
    assert_eq!(scraped["b"], vec![BTreeSet::new()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_use_is_exported_with_its_labels() -> Result<()> {
    let wanted = wanted()?;
    assert!(wanted.len() > 20, "the dashboard and rules name few metrics: {:?}", wanted.keys());

    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(30), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&client, "observed", false, &options).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("observability-names");
    let _ = std::fs::remove_dir_all(&dir);
    let mut system = System::start(&bin_dir(), &dir).await?;
    system.start_operator()?;
    system.apply_source(&source(&queue, &endpoint, &sink.url()).yaml()).await?;
    system.wait_ready_readers(SOURCE, 1, Duration::from_secs(90)).await?;
    queue.send_batch(MESSAGES).await?;
    sink.wait_for_distinct(MESSAGES as u64, Duration::from_secs(90)).await?;

    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let start = Instant::now();
    loop {
        let operator = address_in_log(&dir.join("operator-1.log"), "admin server listening");
        let reader = system
            .running_readers(SOURCE)
            .first()
            .and_then(|r| address_in_log(&system.pod_log(&r.name), "admin listening on"));
        let mut text = String::new();
        for addr in operator.iter().chain(reader.iter()) {
            text.push_str(&scrape(&http, addr).await);
        }
        let problems = missing(&wanted, &samples(&text));
        if problems.is_empty() {
            println!("{} metrics named by the dashboard and the alert rules, all exported", wanted.len());
            return every_exported_metric_is_documented(&text);
        }
        if start.elapsed() > WITHIN {
            bail!(
                "after {WITHIN:?} (operator at {operator:?}, reader at {reader:?}; logs under {}):\n{}",
                dir.display(),
                problems.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
