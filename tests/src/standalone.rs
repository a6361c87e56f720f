//! A reader run as its own process from an SqsSource file (`sluice-reader --source`), as a pod runs
//! it but without the operator or the local control plane; and the pinned Python peers the S3
//! payload suites drive (boto3 and the Amazon SQS Extended Client, tests/scripts/pyclients.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::system::{aws_test_env, bin_dir};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository root").to_owned()
}

/// A `sluice-reader` process we started, its admin server on a port of its own; stopped with
/// SIGTERM when dropped.
pub struct Reader {
    child: Child,
    admin: String,
    log: PathBuf,
}

impl Reader {
    /// Writes `yaml` to `dir/source.yaml` and starts a reader on it, logging to `dir/reader.log`.
    pub fn start(dir: &Path, yaml: &str) -> Result<Self> {
        Self::start_binary(dir, yaml, &bin_dir().join("sluice-reader"))
    }

    /// As [`Reader::start`] with another `sluice-reader` binary (a benchmark's "before").
    pub fn start_binary(dir: &Path, yaml: &str, binary: &Path) -> Result<Self> {
        let source = dir.join("source.yaml");
        std::fs::write(&source, yaml)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let admin = format!("127.0.0.1:{port}");
        let log = dir.join("reader.log");
        let child = Command::new(binary)
            .arg("--source")
            .arg(&source)
            .args(["--admin-addr", &admin, "--shutdown-deadline-seconds", "5"])
            .envs(aws_test_env())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting sluice-reader (cargo build -p sluice-reader first)")?;
        Ok(Self { child, admin, log })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The reader's `/metrics` text now.
    pub async fn metrics(&self) -> Result<String> {
        Ok(reqwest::get(format!("http://{}/metrics", self.admin)).await?.text().await?)
    }

    /// One metric from `/metrics`: its sample, or the sum of its family's samples; 0 when absent.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        Ok(crate::scrape::metric(&self.metrics().await?, name).unwrap_or(0.0))
    }

    /// What the reader logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Each message id's highest `receive_count` in the lines of the log sink named `sink`: how
    /// often SQS handed each message out before it was delivered (what a RedrivePolicy counts).
    pub fn receive_counts(&self, sink: &str) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for line in self.log().lines().filter(|l| l.contains(sink) && l.contains("receive_count")) {
            let field = |name: &str| {
                let at = line.find(&format!("{name}="))? + name.len() + 1;
                let rest = line[at..].trim_start_matches('"');
                Some(rest.split(['"', ' ', ',']).next()?.to_owned())
            };
            if let (Some(id), Some(count)) = (field("message_id"), field("receive_count")) {
                let count: u32 = count.parse().unwrap_or(0);
                let seen = counts.entry(id).or_insert(0);
                *seen = (*seen).max(count);
            }
        }
        counts
    }

    /// VmHWM: the most resident memory the process has had.
    pub fn peak_rss_mib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmHWM in /proc/PID/status")?;
        Ok(kib / 1024)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs tests/scripts/s3_payloads.py with the pinned Python peers (installed on first use) against
/// LocalStack at `endpoint`; its one JSON line of results.
pub fn python(endpoint: &str, args: &[&str]) -> Result<serde_json::Value> {
    let setup = Command::new(repo_root().join("tests/scripts/pyclients.sh"))
        .output()
        .context("running tests/scripts/pyclients.sh")?;
    ensure!(setup.status.success(), "pyclients.sh failed: {}", String::from_utf8_lossy(&setup.stderr));
    let python = String::from_utf8(setup.stdout)?.trim().to_owned();
    let out = Command::new(python)
        .arg(repo_root().join("tests/scripts/s3_payloads.py"))
        .args(args)
        .envs(aws_test_env())
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()?;
    ensure!(out.status.success(), "s3_payloads.py {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(serde_json::from_slice(&out.stdout)?)
}
