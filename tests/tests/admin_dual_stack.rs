//! The admin servers listen on `[::]` with IPV6_V6ONLY off, so probes and scrapes reach them over
//! IPv4 and IPv6 (an IPv6 EKS cluster probes the pod's IPv6 address). As separate processes: a
//! standalone reader and the operator (against the local control plane), each started with
//! `--admin-addr [::]:0`, must answer `/healthz` on `127.0.0.1` and on `[::1]`. Only loopback is
//! ever contacted. Skipped, saying so, on a host whose loopback has no IPv6 (`::1`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use sluice_tests::localstack::{LocalStack, TestQueue, sqs_client};
use sluice_tests::poll::{self, Check};
use sluice_tests::sinkserver::SinkServer;
use sluice_tests::source::{Sink, SourceYaml};
use sluice_tests::system::{System, aws_test_env, bin_dir};

/// Killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ipv6_loopback() -> bool {
    let ok = std::net::TcpListener::bind("[::1]:0").is_ok();
    if !ok {
        println!("SKIPPED: this host has no IPv6 loopback");
    }
    ok
}

/// Waits until `/healthz` answers `ok` on both loopbacks at `port`; prints what each answered.
async fn healthy_on_both_loopbacks(who: &str, port: u16) -> Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    for host in ["127.0.0.1", "[::1]"] {
        let url = format!("http://{host}:{port}/healthz");
        let answer = poll::until(Duration::from_secs(60), Duration::from_millis(250), || async {
            Ok(match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => Check::Met(r.text().await.unwrap_or_default()),
                Ok(r) => Check::NotYet(format!("{url} answered {}", r.status())),
                Err(e) => Check::NotYet(format!("{url}: {e}")),
            })
        })
        .await?;
        println!("{who}: GET {url} -> {answer}");
        assert_eq!(answer, "ok");
    }
    Ok(())
}

/// The port in the last `[::]:PORT` of `file`, once it is there.
async fn port_in(file: &Path, marker: &str) -> Result<u16> {
    poll::until(Duration::from_secs(60), Duration::from_millis(200), || async {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let port = text
            .lines()
            .rfind(|l| l.contains(marker))
            .and_then(|l| l.split("[::]:").nth(1))
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u16>().ok());
        Ok(match port {
            Some(port) => Check::Met(port),
            None => {
                Check::NotYet(format!("no \"{marker}\" line with [::]:PORT in {}:\n{text}", file.display()))
            }
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_answers_on_ipv4_and_ipv6_loopback() -> Result<()> {
    if !ipv6_loopback() {
        return Ok(());
    }
    let endpoint = LocalStack::ensure().await?;
    let queue = TestQueue::create(&sqs_client(&endpoint), "dual-stack", false).await?;
    let sink = SinkServer::start("127.0.0.1:0").await?;
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("source.yaml");
    std::fs::write(
        &source,
        SourceYaml::new("dual", &queue.url, &endpoint).sink("web", Sink::http(&sink.url())).yaml(),
    )?;
    let addr_file = dir.path().join("admin.addr");
    let reader = Command::new(bin_dir().join("sluice-reader"))
        .arg("--source")
        .arg(&source)
        .args(["--admin-addr", "[::]:0"])
        .arg(format!("--admin-addr-file={}", addr_file.display()))
        .envs(aws_test_env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting sluice-reader")?;
    let reader = Process(reader);
    let port = port_in(&addr_file, "").await?;
    healthy_on_both_loopbacks("reader", port).await?;
    drop(reader);
    sink.stop().await?;
    queue.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_answers_on_ipv4_and_ipv6_loopback() -> Result<()> {
    if !ipv6_loopback() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let system = System::start(&bin_dir(), dir.path()).await?;
    let log = dir.path().join("operator.log");
    let operator = Command::new(bin_dir().join("sluice-operator"))
        .args(["--admin-addr", "[::]:0", "--leader-election", "off", "--log-format", "json"])
        .args(["--reader-image", "sluice:local"])
        .args(["--namespace", &system.namespace])
        .env("KUBECONFIG", system.operator_kubeconfig())
        .envs(aws_test_env())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting sluice-operator")?;
    let operator = Process(operator);
    let port = port_in(&log, "admin server listening").await?;
    healthy_on_both_loopbacks("operator", port).await?;
    drop(operator);
    drop(system);
    Ok(())
}
