//! Where the suites that run the real `kubectl` find it.

use std::path::PathBuf;

/// `/usr/bin/kubectl`, or `KUBECTL`. Where it is absent the suite says so and passes (these suites
/// test the cluster through a user's tool, not the tool), except under `CI=true`, where the runner
/// must provide it.
pub fn path() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
    if path.is_file() {
        return Some(path);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{} is missing and CI=true", path.display());
    println!("SKIPPED: {} not found (set KUBECTL to a kubectl binary)", path.display());
    None
}
