//! API priority and fairness throttling the operator on the real API server: a FlowSchema that
//! matches only this suite's operator ServiceAccount (everything but its Lease) sends its requests
//! to a PriorityLevelConfiguration with no nominal concurrency shares, nothing to borrow and no
//! queue, so the API server serves them one at a time and answers every overlapping one 429 with
//! a Retry-After. Meanwhile messages flow through the source's reader (the data path
//! never talks to the API server) and the source's spec changes. The operator must honour the
//! 429s (retry after waiting), count them (`sluice_operator_api_throttled_responses_total`, the
//! seconds waited), log one WARN per episode (not per 429), report not ready, and, once the FlowSchema is
//! gone, carry out the spec change and report ready again; nothing may be lost.
//!
//! Both objects are cluster-scoped and named after the suite's namespace, and the FlowSchema's
//! only subject is that namespace's ServiceAccount: other suites' operators on the shared cluster
//! are not matched. They are deleted at the end, also when the test fails.
//!
//! About a minute on a quiet machine: ~20 s throttled, then the wait for the episode's end (10 s
//! after the last retry the API server asked for).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::scrape::metric;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::System;
use tokio_util::sync::CancellationToken;

/// The FlowSchema and PriorityLevelConfiguration of one suite run: created in `new`, deleted by
/// `remove` or on drop.
struct Throttle {
    client: kube::Client,
    name: String,
    removed: bool,
}

impl Throttle {
    async fn new(system: &System) -> Result<Self> {
        let name = format!("sluice-throttle-{}", system.namespace);
        let account = sluice_tests::install::operator_service_account()?;
        let level: PriorityLevelConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {
                // No seats of its own and none to borrow: every matched request is rejected.
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            }},
        }))?;
        let schema: FlowSchema = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                // Before the built-in service-accounts schema (9000), after the system ones.
                "matchingPrecedence": 1000,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [{"kind": "ServiceAccount",
                        "serviceAccount": {"name": account, "namespace": system.namespace}}],
                    // Not coordination.k8s.io: a throttled Lease would make the operator step down,
                    // which is the failover suite's fault, not this one.
                    "resourceRules": [{
                        "verbs": ["*"],
                        "apiGroups": ["", "apps", "sluice.dev", "events.k8s.io"],
                        "resources": ["*"],
                        "namespaces": ["*"],
                        "clusterScope": true,
                    }],
                }],
            },
        }))?;
        let client = system.client.clone();
        Api::<PriorityLevelConfiguration>::all(client.clone()).create(&PostParams::default(), &level).await?;
        let throttle = Self { client: client.clone(), name, removed: false };
        Api::<FlowSchema>::all(client).create(&PostParams::default(), &schema).await?;
        Ok(throttle)
    }

    async fn remove(&mut self) -> Result<()> {
        Api::<FlowSchema>::all(self.client.clone()).delete(&self.name, &DeleteParams::default()).await?;
        Api::<PriorityLevelConfiguration>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (client, name) = (self.client.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let _ = Api::<FlowSchema>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
                Api::<PriorityLevelConfiguration>::all(client)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Waits until the API server applies the FlowSchema (its configuration controller takes a moment):
/// of 8 concurrent requests as the operator's ServiceAccount, without kube's retries, some are
/// answered 429. Concurrent, because the level still serves one request at a time: the API
/// server gives a level with no nominal shares a single seat, so only what overlaps is rejected.
/// The suite's SqsSources as the operator's ServiceAccount sees them, without kube's retries.
async fn as_the_operator(system: &System) -> Result<Api<sluice_crds::SqsSource>> {
    let kubeconfig = kube::config::Kubeconfig::read_from(system.operator_kubeconfig())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
    config.default_retry = false;
    Ok(Api::namespaced(kube::Client::try_from(config)?, &system.namespace))
}

/// Keeps the operator's flow busy until `stop`: four lists at a time as its ServiceAccount, as
/// other clients sharing a flow do. Why: the level serves one request at a time and refuses only
/// those that arrive while it is taken, so on its own a quiet operator may meet it free; with the
/// seat kept taken, the operator's requests meet a full level whatever the machine's pace.
fn crowd(sources: Api<sluice_crds::SqsSource>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let params = kube::api::ListParams::default();
        while !stop.is_cancelled() {
            let _ = futures::future::join_all((0..4).map(|_| sources.list(&params))).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

async fn rejected_as_the_operator(system: &System) -> Result<()> {
    let sources = as_the_operator(system).await?;
    let params = kube::api::ListParams::default();
    poll::until(Duration::from_secs(30), Duration::from_millis(200), || async {
        let answers = futures::future::join_all((0..8).map(|_| sources.list(&params))).await;
        let rejected =
            answers.iter().filter(|a| matches!(a, Err(kube::Error::Api(s)) if s.code == 429)).count();
        Ok(if rejected > 0 {
            Check::Met(())
        } else {
            Check::NotYet("no request as the operator was answered 429".to_owned())
        })
    })
    .await
}

/// The operator's `/metrics` text and whether `/readyz` answers 200.
async fn operator_admin(system: &System, http: &reqwest::Client) -> Result<(String, bool)> {
    let addr =
        system.operator_admin_addr("operator-1").context("the operator has not said where it listens")?;
    let metrics = http.get(format!("http://{addr}/metrics")).send().await?.text().await?;
    let ready = http.get(format!("http://{addr}/readyz")).send().await?.status().is_success();
    Ok((metrics, ready))
}

/// The log's WARN lines (an episode starts) and INFO lines (it ended) tell each episode once: every
/// start has its end, and a new episode starts only after the last one was quiet for the operator's
/// 10 s (so never a line per 429). How many episodes one throttled stretch makes depends on the
/// operator's own requests: this priority level answers only overlapping requests 429, and an
/// operator with nothing to do for 10 s has no request to be throttled, so its episode ends and a
/// later 429 begins another.
fn assert_throttling_told_once_per_episode(warns: &[&str], ends: &[&str]) -> Result<()> {
    let at = |line: &str| -> Result<k8s_openapi::jiff::Timestamp> {
        let stamp = line.split_whitespace().next().context("a log line without a time")?;
        Ok(stamp.parse()?)
    };
    assert!(!warns.is_empty(), "no WARN line for the throttling");
    assert_eq!(warns.len(), ends.len(), "each episode's start has its end line");
    let (starts, ends) = (
        warns.iter().map(|l| at(l)).collect::<Result<Vec<_>>>()?,
        ends.iter().map(|l| at(l)).collect::<Result<Vec<_>>>()?,
    );
    for (i, (start, end)) in starts.iter().zip(&ends).enumerate() {
        assert!(start < end, "episode {i} ends ({end}) after it starts ({start})");
        if let Some(next) = starts.get(i + 1) {
            let quiet = next.duration_since(*end);
            assert!(next >= end, "episode {} starts ({next}) after episode {i} ends ({end})", i + 1);
            println!("episode {i}: {start} -> {end}; the next began {:.1} s later", quiet.as_secs_f64());
        }
        // The end is said once the episode has been quiet for 10 s (its last retry plus QUIET).
        let lasted = end.duration_since(*start).as_secs_f64();
        assert!(lasted >= 10.0, "episode {i} ended {lasted:.1} s after it began, before 10 s of quiet");
    }
    Ok(())
}

fn figure(text: &str, name: &str) -> f64 {
    metric(text, name).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_operator_backs_off_says_so_and_recovers_losing_nothing() -> Result<()> {
    let wall = Instant::now();
    let endpoint = LocalStack::ensure().await?;
    let sqs = sqs_client(&endpoint);
    let options = QueueOptions { visibility_timeout: Some(10), ..QueueOptions::default() };
    let queue = TestQueue::create_with(&sqs, "e2e-throttled", false, &options).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-api-throttling");
    let system = System::start_with_operator(&dir).await?;
    let yaml = |replicas: i32| {
        SourceYaml::new("throttled", &queue.url, &endpoint)
            .at_least_once()
            .visibility_timeout(10)
            .sink("webhook", Sink::http(&sink.url()).timeout_ms(2_000))
            .replicas(replicas, replicas)
            .yaml()
    };
    system.apply_source(&yaml(1)).await?;
    system.wait_ready_readers("throttled", 1, Duration::from_secs(60)).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;

    let mut throttle = Throttle::new(&system).await?;
    let start = Instant::now();
    let at = || start.elapsed().as_secs_f64();
    println!("[{:5.1}s] FlowSchema and PriorityLevelConfiguration {} applied", at(), throttle.name);
    rejected_as_the_operator(&system).await?;
    println!("[{:5.1}s] the API server rejects the operator's ServiceAccount (429)", at());
    let crowding = CancellationToken::new();
    let crowd = crowd(as_the_operator(&system).await?, crowding.clone());
    // A spec change the operator must carry out (its watch sees it; its writes are throttled).
    system.apply_source(&yaml(2)).await?;
    const MESSAGES: u64 = 600;
    queue.send_batch(MESSAGES as usize).await?;
    let throttled = poll::until(Duration::from_secs(60), Duration::from_millis(250), || async {
        let (text, ready) = operator_admin(&system, &http).await?;
        let responses = figure(&text, "sluice_operator_api_throttled_responses_total");
        Ok(if responses >= 3.0 && !ready {
            Check::Met(responses)
        } else {
            Check::NotYet(format!("{responses} throttled responses, ready {ready}"))
        })
    })
    .await?;
    println!("[{:5.1}s] throttled: {throttled} 429s counted, /readyz not ready", at());
    let stats = sink.wait_for_distinct(MESSAGES, Duration::from_secs(60)).await?;
    let replicas_throttled = system.reader_replicas("throttled").await?;
    let (text, ready) = operator_admin(&system, &http).await?;
    println!(
        "[{:5.1}s] while throttled: delivered {} distinct of {MESSAGES}; spec.replicas {} (asked 2); \
         {} 429s, {:.1} s waited, api_throttled {}, ready {ready}",
        at(),
        stats.distinct,
        replicas_throttled.unwrap_or(0),
        figure(&text, "sluice_operator_api_throttled_responses_total"),
        figure(&text, "sluice_operator_api_throttled_wait_seconds_total"),
        figure(&text, "sluice_operator_api_throttled"),
    );

    crowding.cancel();
    crowd.await?;
    throttle.remove().await?;
    let removed = at();
    println!("[{removed:5.1}s] FlowSchema removed");
    poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let replicas = system.reader_replicas("throttled").await?;
        Ok(Check::met_if(replicas == Some(2), || format!("spec.replicas still {}", replicas.unwrap_or(0))))
    })
    .await?;
    println!("[{:5.1}s] the spec change is carried out: spec.replicas 2", at());
    let (text, _) = poll::until(Duration::from_secs(90), Duration::from_millis(250), || async {
        let (text, ready) = operator_admin(&system, &http).await?;
        Ok(if ready {
            Check::Met((text, ready))
        } else {
            Check::NotYet("the operator is still not ready".into())
        })
    })
    .await?;
    println!(
        "[{:5.1}s] ready again ({:.1} s after the removal): {} 429s, {:.1} s waited in all",
        at(),
        at() - removed,
        figure(&text, "sluice_operator_api_throttled_responses_total"),
        figure(&text, "sluice_operator_api_throttled_wait_seconds_total"),
    );
    let log = std::fs::read_to_string(system.operator_log("operator-1"))?;
    let warns: Vec<&str> = log.lines().filter(|l| l.contains("is throttling this operator")).collect();
    let ends: Vec<&str> = log.lines().filter(|l| l.contains("stopped throttling this operator")).collect();
    for line in warns.iter().chain(&ends) {
        println!("operator log: {line}");
    }
    let stats = sink.stats();
    println!(
        "delivered {} distinct of {MESSAGES}, {} duplicates; test wall {:.1} s",
        stats.distinct,
        stats.duplicates,
        wall.elapsed().as_secs_f64()
    );
    assert_eq!(stats.distinct, MESSAGES, "lost messages");
    assert_throttling_told_once_per_episode(&warns, &ends)?;
    assert_eq!(figure(&text, "sluice_operator_api_throttled"), 0.0);
    drop(system);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}
