//! Where the control plane's binaries are: `SLUICE_KUBE_BINARIES` when the test command already asked
//! (it builds them once, before the suites run), else tests/scripts/kube-binaries.sh, which builds
//! them into a cache outside the work tree the first time (or takes them from `KUBEBUILDER_ASSETS`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// The directory holding kube-apiserver, kube-controller-manager, kube-scheduler and etcd for
/// Kubernetes `minor` (`None`: the newest pinned).
pub fn locate(minor: Option<&str>) -> Result<PathBuf> {
    if minor.is_none()
        && let Some(dir) = std::env::var_os("SLUICE_KUBE_BINARIES")
    {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-binaries.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(minor)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}
