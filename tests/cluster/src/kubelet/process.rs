//! One container as a local process: spawn with its env and a log file, signal, reap.
//!
//! The process leads its own process group so that SIGKILL at the end of the grace period takes any
//! children with it (as a container's cgroup would), while SIGTERM goes to the leader only (as a
//! container's PID 1 receives it). The process does not inherit the kubelet's environment: it starts
//! from `PATH` and `HOME` (what an image's env would give), then the node's pod environment (see
//! [`super::Config::pod_env`]), then the container's own env.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Instant;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// A running (or just exited) container process.
#[derive(Debug)]
pub struct Process {
    child: Child,
    pid: Option<u32>,
    /// When it was started.
    pub started: Instant,
}

impl Process {
    /// Starts `program args…` with `env` added, in `workdir`, appending stdout and stderr to `log`.
    pub fn spawn(
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        workdir: &Path,
        log: &Path,
    ) -> std::io::Result<Self> {
        let mut file = OpenOptions::new().create(true).append(true).open(log)?;
        writeln!(file, "--- sluice-kubelet: starting {} {}", program.display(), args.join(" "))?;
        let err = file.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(["PATH", "HOME"].iter().filter_map(|k| Some((*k, std::env::var_os(k)?))))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id();
        Ok(Self { child, pid, started: Instant::now() })
    }

    /// The OS process id (while it has not been reaped).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The exit status if it has exited (reaping it), without waiting. Whatever the process left
    /// behind in its group is killed, as a container's processes die with its PID 1.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            // Cannot query: treat as gone rather than supervising a ghost.
            Err(_) => ExitStatus::default(),
        };
        // The group id outlives the leader while members remain, and Linux does not hand it out as a
        // new pid meanwhile, so this reaches only the leftovers.
        if let Some(pid) = self.raw_pid() {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        Some(status)
    }

    /// Sends SIGTERM to the process (not its children), as a container runtime does to PID 1.
    pub fn terminate(&self) {
        if let Some(pid) = self.raw_pid() {
            let _ = kill(pid, Signal::SIGTERM);
        }
    }

    /// Appends a line of the kubelet's own to the container's log.
    pub fn note(log: &Path, line: &str) {
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(log) {
            let _ = writeln!(file, "--- {line}");
        }
    }

    /// Sends SIGKILL to the whole process group.
    pub fn kill(&mut self) {
        if let Some(pid) = self.raw_pid() {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        let _ = self.child.start_kill();
    }

    fn raw_pid(&self) -> Option<Pid> {
        self.pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw)
    }
}
