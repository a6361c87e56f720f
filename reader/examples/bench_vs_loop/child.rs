//! The consumer processes the benches start: where the reader binary is, and how it is stopped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `target/<profile>/sluice-reader`, the reader built beside this example.
pub fn default_reader() -> Result<PathBuf, String> {
    Ok(sluice_tests::system::bin_dir().join("sluice-reader"))
}

/// SIGTERM to the consumer's PID, a bounded wait, then SIGKILL; always reaped.
pub fn stop(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    for _ in 0..200 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Start `command` as a consumer of LocalStack (test credentials), its stderr into the file `log`.
pub fn spawn_consumer(command: &mut Command, log: &std::path::Path) -> Result<Child, String> {
    let stderr = std::fs::File::create(log).map_err(|e| e.to_string())?;
    command
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", command.get_program().to_string_lossy()))
}
