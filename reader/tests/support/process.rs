//! The reader binary as a process: started from a spec, watched through its admin server, stopped
//! with SIGTERM, its exit code read.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Reader {
    child: Child,
    pub dir: tempfile::TempDir,
    pub admin: Option<SocketAddr>,
}

impl Reader {
    /// Start `sluice-reader --source <yaml>` with test credentials and a loopback admin port.
    pub fn start(yaml: &str, extra: &[&str]) -> Self {
        Self::start_logging(yaml, extra, "info")
    }

    /// As [`Reader::start`], with `RUST_LOG` set to `filter`.
    pub fn start_logging(yaml: &str, extra: &[&str], filter: &str) -> Self {
        Self::start_with_env(yaml, extra, filter, &[])
    }

    /// As [`Reader::start_logging`], with these environment variables too (a cluster reader's
    /// `KUBECONFIG` and `POD_NAME`).
    pub fn start_with_env(yaml: &str, extra: &[&str], filter: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source.yaml");
        std::fs::write(&source, yaml).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice-reader"))
            .arg("--source")
            .arg(&source)
            .arg("--admin-addr=127.0.0.1:0")
            .arg("--admin-addr-file")
            .arg(dir.path().join("admin"))
            .args(extra)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("RUST_LOG", filter)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .unwrap();
        Self { child, dir, admin: None }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn admin_file(&self) -> PathBuf {
        self.dir.path().join("admin")
    }

    /// Wait (bounded) for the admin address.
    pub async fn admin(&mut self) -> SocketAddr {
        if let Some(addr) = self.admin {
            return addr;
        }
        for _ in 0..300 {
            if let Ok(text) = std::fs::read_to_string(self.admin_file())
                && let Ok(addr) = text.trim().parse()
            {
                self.admin = Some(addr);
                return addr;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the reader never wrote its admin address; stderr:\n{}", self.stderr());
    }

    /// The sum of every sample of `name` (all label sets) on /metrics.
    pub async fn metric(&mut self, name: &str) -> f64 {
        let addr = self.admin().await;
        let Ok(answer) = reqwest::get(format!("http://{addr}/metrics")).await else { return 0.0 };
        let text = answer.text().await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    }

    /// Wait (bounded) until `name` reaches `at_least`; returns the last value seen.
    pub async fn wait_metric(&mut self, name: &str, at_least: f64, within: Duration) -> f64 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let value = self.metric(name).await;
            if value >= at_least || tokio::time::Instant::now() >= deadline {
                return value;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the reader exited early with {status}; stderr:\n{}", self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn sigterm(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Wait (bounded) for the exit code; kills the reader if it overstays.
    pub async fn exit_code(&mut self, within: Duration) -> i32 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("the reader did not exit within {within:?}; stderr:\n{}", self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
