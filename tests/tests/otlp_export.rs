//! Spans exported over OTLP/HTTP: a reader's delivery of a message that carried a `traceparent`
//! arrives at the collector as a span of the producer's trace (same trace id, the producer's span
//! as parent), under the reader's service name and source; and a reader whose collector is not
//! there delivers everything anyway, counting and reporting the failed exports.
//!
//! Real components: LocalStack's SQS, the `sluice-reader` binary run standalone, the suites' HTTP
//! CloudEvents sink, and an OTLP/HTTP receiver on 127.0.0.1 that decodes each request as a
//! collector does (`ExportTraceServiceRequest`, protobuf).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use aws_sdk_sqs::types::MessageAttributeValue;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::scrape::metric;
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, aws_test_env};
use tokio::task::JoinHandle;

/// One exported span, flattened with its resource.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    parent_span_id: String,
    resource: Vec<(String, String)>,
}

impl Exported {
    fn resource(&self, key: &str) -> Option<&str> {
        self.resource.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

type Collected = Arc<Mutex<Vec<Exported>>>;

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        _ => String::new(),
    }
}

fn pairs(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The collector's endpoint: decode, keep every span, answer as a collector does.
async fn collect(State(collected): State<Collected>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
    let mut spans = collected.lock().unwrap_or_else(|e| e.into_inner());
    for resource_spans in request.resource_spans {
        let resource = pairs(&resource_spans.resource.map(|r| r.attributes).unwrap_or_default());
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(Exported {
                name: span.name,
                trace_id: hex(&span.trace_id),
                parent_span_id: hex(&span.parent_span_id),
                resource: resource.clone(),
            });
        }
    }
    StatusCode::OK
}

/// An OTLP/HTTP receiver on 127.0.0.1: what it collected, its address, its task.
async fn collector() -> Result<(Collected, SocketAddr, JoinHandle<std::io::Result<()>>)> {
    let collected: Collected = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/v1/traces", axum::routing::post(collect)).with_state(collected.clone());
    Ok((collected, addr, tokio::spawn(async move { axum::serve(listener, app).await })))
}

/// A process we started (reader or operator); killed if still running when dropped.
struct Process(Option<Child>);

/// A standalone reader of `source`, JSON logs to `stderr`, exporting to `otlp_endpoint`.
fn reader(source: &Path, otlp_endpoint: &str, stderr: &Path, env: &[(&str, &str)]) -> Result<Process> {
    let child = Command::new(sluice_tests::system::bin_dir().join("sluice-reader"))
        .arg("--source")
        .arg(source)
        .arg("--admin-addr=127.0.0.1:0")
        .arg(format!("--admin-addr-file={}", source.with_extension("addr").display()))
        .arg("--log-format=json")
        .arg(format!("--otlp-endpoint={otlp_endpoint}"))
        .envs(aws_test_env())
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr)?)
        .spawn()
        .context("starting sluice-reader (build it first: cargo build -p sluice-reader)")?;
    Ok(Process(Some(child)))
}

impl Process {
    /// SIGTERM (a drain) and wait for the exit, at most 30 s.
    fn terminate(mut self) -> Result<ExitStatus> {
        let mut child = self.0.take().context("the reader was already stopped")?;
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("the process did not exit within 30 s of SIGTERM")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn random_hex(digits: usize) -> String {
    (0..digits).map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0')).collect()
}

/// Send `count` messages, each with a `traceparent` of its own; their (trace id, parent span id).
async fn send_traced(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    count: usize,
) -> Result<Vec<(String, String)>> {
    let mut sent = Vec::new();
    for i in 0..count {
        let (trace_id, parent) = (random_hex(32), random_hex(16));
        let traceparent = format!("00-{trace_id}-{parent}-01");
        let attribute =
            MessageAttributeValue::builder().data_type("String").string_value(traceparent).build()?;
        client
            .send_message()
            .queue_url(queue)
            .message_body(format!("traced {i}"))
            .message_attributes("traceparent", attribute)
            .send()
            .await
            .context("SendMessage with a traceparent attribute")?;
        sent.push((trace_id, parent));
    }
    Ok(sent)
}

fn source_file(dir: &Path, name: &str, queue: &str, endpoint: &str, sink: &SinkServer) -> Result<PathBuf> {
    let yaml = SourceYaml::bare(name, queue, endpoint)
        .wait_time(1)
        .sink("webhook", Sink::http(&sink.url()).timeout_ms(2000))
        .yaml();
    let path = dir.join("source.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_spans_join_the_producers_trace() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let queue = TestQueue::create_with(&client, "otlp", false, &QueueOptions::default()).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;

    let (collected, collector, server) = collector().await?;

    let traced = send_traced(&client, &queue.url, 3).await?;
    client.send_message().queue_url(&queue.url).message_body("untraced").send().await?;

    let dir = tempfile::tempdir()?;
    let source = source_file(dir.path(), "otlp", &queue.url, &endpoint, &sink)?;
    let stderr = dir.path().join("stderr");
    // A schedule longer than the test: whatever arrives was sent by the flush at the end of the drain.
    let env = [("POD_NAMESPACE", "shop"), ("OTEL_BSP_SCHEDULE_DELAY", "600000")];
    let reader = reader(&source, &format!("http://{collector}"), &stderr, &env)?;
    sink.wait_for_distinct(4, Duration::from_secs(60)).await?;
    let status = reader.terminate()?;
    server.abort();
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(status.success(), "reader exit {status}; log:\n{log}");

    let spans = collected.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    println!("exported {} spans: {names:?}", spans.len());
    let messages: Vec<&Exported> = spans.iter().filter(|s| s.name == "deliver_message").collect();
    assert_eq!(messages.len(), 3, "one span per traced message, none for the untraced one: {names:?}");
    for (trace_id, parent) in &traced {
        let span = messages.iter().find(|s| &s.trace_id == trace_id);
        let span = span.with_context(|| format!("no span in trace {trace_id}: {spans:?}"))?;
        assert_eq!(&span.parent_span_id, parent, "the producer's span is the parent");
    }
    assert!(names.contains(&"deliver"), "the batch's delivery span is exported: {names:?}");
    assert!(!names.contains(&"poll"), "the poller's life-long span is not exported: {names:?}");
    for span in &spans {
        assert_eq!(span.resource("service.name"), Some("sluice-reader"), "{span:?}");
        assert_eq!(span.resource("sluice.source"), Some("otlp"), "{span:?}");
        assert_eq!(span.resource("k8s.namespace.name"), Some("shop"), "{span:?}");
    }
    assert!(!log.contains("OTLP span export"), "no export failure reported: {log}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_collector_costs_no_message() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let queue = TestQueue::create_with(&client, "otlp-closed", false, &QueueOptions::default()).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    // A port nothing listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;

    const MESSAGES: usize = 20;
    send_traced(&client, &queue.url, MESSAGES).await?;
    let dir = tempfile::tempdir()?;
    let source = source_file(dir.path(), "otlp-closed", &queue.url, &endpoint, &sink)?;
    let stderr = dir.path().join("stderr");
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let reader = reader(&source, &format!("http://{closed}"), &stderr, &env)?;
    let delivered = sink.wait_for_distinct(MESSAGES as u64, Duration::from_secs(60)).await?;

    let addr_file = source.with_extension("addr");
    let http = reqwest::Client::new();
    let start = Instant::now();
    let failures = loop {
        let addr = std::fs::read_to_string(&addr_file).unwrap_or_default();
        let text = match http.get(format!("http://{}/metrics", addr.trim())).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let failures = metric(&text, "sluice_reader_otlp_export_failures_total").unwrap_or(0.0);
        if failures >= 1.0 {
            break failures;
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("no failed export counted within 60 s; metrics:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = reader.terminate()?;
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    println!("delivered {delivered:?} with the collector away; failed exports counted: {failures}");
    assert!(status.success(), "reader exit {status}; log:\n{log}");
    assert_eq!(delivered.distinct, MESSAGES as u64);
    let url = format!("http://{closed}/v1/traces");
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("OTLP span export to")).collect();
    println!("{}", warnings.join("\n"));
    assert_eq!(warnings.len(), 1, "one rate-limited WARN line: {warnings:?}\n{log}");
    assert!(warnings[0].contains(&url) && warnings[0].contains(r#""level":"WARN""#), "{}", warnings[0]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_exports_its_reconcile_spans() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let queue = TestQueue::create_with(&client, "otlp-op", false, &QueueOptions::default()).await?;
    let (collected, collector, server) = collector().await?;
    let dir = tempfile::tempdir()?;
    let system = System::start(&sluice_tests::system::bin_dir(), dir.path()).await?;

    let operator = Command::new(sluice_tests::system::bin_dir().join("sluice-operator"))
        .args(["--admin-addr", "127.0.0.1:0", "--leader-election", "off", "--log-format", "json"])
        .args(["--reader-image", "sluice:local"])
        .arg(format!("--otlp-endpoint=http://{collector}"))
        .args(["--namespace", &system.namespace])
        .env("KUBECONFIG", system.operator_kubeconfig())
        // Longer than the test: what arrives was sent by the flush at shutdown.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .envs(aws_test_env())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("operator.log"))?)
        .spawn()
        .context("starting sluice-operator")?;
    let operator = Process(Some(operator));
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let yaml =
        SourceYaml::new("otlp-op", &queue.url, &endpoint).sink("webhook", Sink::http(&sink.url())).yaml();
    system.apply_source(&yaml).await?;
    let start = Instant::now();
    while system.reader_deployment("otlp-op").await?.is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let log = std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();
            bail!("the operator made no reader Deployment within 60 s; its log:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = operator.terminate()?;
    server.abort();
    assert!(status.success(), "operator exit {status}");
    let spans = collected.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    println!("the operator exported {} spans: {names:?}", spans.len());
    assert!(names.contains(&"reconcile"), "{names:?}");
    assert!(spans.iter().all(|s| s.resource("service.name") == Some("sluice-operator")), "{spans:?}");
    Ok(())
}
