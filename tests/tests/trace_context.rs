//! A producer's trace continues at the HTTP sink: the reader process passes a message's W3C trace
//! context on as the `traceparent` header, from a `traceparent` message attribute as it is, and
//! from SQS's `AWSTraceHeader` system attribute (X-Ray's format) converted.
//!
//! Real components: LocalStack's SQS, the `sluice-reader` binary run standalone from an SqsSource
//! file, and an HTTP server on 127.0.0.1 that records the headers of each CloudEvent it accepts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_tests::localstack::{LocalStack, QueueOptions, TestQueue, sqs_client};
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::aws_test_env;

const W3C: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
const XRAY_AS_W3C: &str = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01";

fn reader_binary() -> PathBuf {
    sluice_tests::system::bin_dir().join("sluice-reader")
}

/// `traceparent` header (or None) of each accepted event, by `ce-id`.
type Seen = Arc<Mutex<HashMap<String, Option<String>>>>;

async fn accept(State(seen): State<Seen>, headers: HeaderMap) -> StatusCode {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Some(id) = text("ce-id") else { return StatusCode::BAD_REQUEST };
    seen.lock().unwrap_or_else(|e| e.into_inner()).insert(id, text("traceparent"));
    StatusCode::OK
}

/// A reader process we started; SIGTERMed (then killed) when dropped.
struct Reader(Child);

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn source_yaml(queue: &str, endpoint: &str, sink: SocketAddr) -> String {
    SourceYaml::bare("traced", queue, endpoint)
        .wait_time(1)
        .sink("webhook", Sink::http(&format!("http://{sink}/events")).timeout_ms(2000))
        .yaml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_arrives_at_the_http_sink_as_traceparent() -> Result<()> {
    let endpoint = LocalStack::ensure().await?;
    let client = sqs_client(&endpoint);
    let queue = TestQueue::create_with(&client, "traced", false, &QueueOptions::default()).await?;

    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink = listener.local_addr()?;
    let app = Router::new().route("/events", axum::routing::post(accept)).with_state(seen.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let string = |v: &str| MessageAttributeValue::builder().data_type("String").string_value(v).build();
    let with_attribute = client
        .send_message()
        .queue_url(&queue.url)
        .message_body("w3c")
        .message_attributes("traceparent", string(W3C)?)
        .send()
        .await
        .context("SendMessage with a traceparent attribute")?;
    let xray = MessageSystemAttributeValue::builder().data_type("String").string_value(XRAY).build()?;
    let with_xray = client
        .send_message()
        .queue_url(&queue.url)
        .message_body("xray")
        .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, xray)
        .send()
        .await
        .context("SendMessage with AWSTraceHeader")?;
    let untraced = client.send_message().queue_url(&queue.url).message_body("plain").send().await?;

    let dir = tempfile::tempdir()?;
    let source = dir.path().join("source.yaml");
    std::fs::write(&source, source_yaml(&queue.url, &endpoint, sink))?;
    let stderr = dir.path().join("stderr");
    let _reader = Reader(
        Command::new(reader_binary())
            .arg("--source")
            .arg(&source)
            .arg("--admin-addr=127.0.0.1:0")
            .envs(aws_test_env())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("starting sluice-reader (build it first: cargo build -p sluice-reader)")?,
    );

    let ids = [&with_attribute, &with_xray, &untraced].map(|m| m.message_id().unwrap_or_default().to_owned());
    let start = Instant::now();
    let arrived = loop {
        let now = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if ids.iter().all(|id| now.contains_key(id)) {
            break now;
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!(
                "only {} of 3 events arrived within 60 s; reader log:\n{}",
                now.len(),
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    server.abort();

    println!("traceparent at the sink: {arrived:?}");
    assert_eq!(arrived[&ids[0]].as_deref(), Some(W3C), "the traceparent attribute is passed on as it is");
    assert_eq!(arrived[&ids[1]].as_deref(), Some(XRAY_AS_W3C), "AWSTraceHeader is converted");
    assert_eq!(arrived[&ids[2]], None, "a message without trace context gets no traceparent");
    Ok(())
}
