//! One control-plane process (etcd, kube-apiserver, kube-controller-manager, kube-scheduler): started
//! with its arguments and a log file, stopped by its PID, started again with the same arguments.
//!
//! The fault suites stop and restart single components (an API server restart, etcd away for 30 s),
//! so each keeps what it needs to come back exactly as it was.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A supervised control-plane process.
#[derive(Debug)]
pub struct Component {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Component {
    /// Starts `program args…`, appending its output to `log`.
    pub fn start(name: &'static str, program: &Path, args: Vec<String>, log: &Path) -> Result<Self> {
        let mut component =
            Self { name, program: program.to_owned(), args, log: log.to_owned(), child: None };
        component.resume()?;
        Ok(component)
    }

    /// The component's name (`kube-apiserver`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it has exited on its own (a crash, a refused flag), with how.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// Starts it again with the same arguments (after [`Self::stop`]); a no-op while it runs.
    pub fn resume(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let mut out = OpenOptions::new().create(true).append(true).open(&self.log)?;
        writeln!(out, "--- sluice-cluster: starting {} {}", self.program.display(), self.args.join(" "))?;
        let err = out.try_clone()?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Stops it with `signal`, then SIGKILL after `grace`, and reaps it.
    pub fn stop(&mut self, signal: Signal, grace: Duration) {
        if let Some(child) = self.child.take() {
            stop_process(child, signal, grace);
        }
    }

    /// The last `lines` lines of its log, for an error message.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Signal::SIGTERM, Duration::from_secs(10));
    }
}

/// Sends `signal` to a process this harness started, waits up to `grace` for it to exit, then
/// SIGKILLs it; reaped either way.
pub fn stop_process(mut child: Child, signal: Signal, grace: Duration) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
