//! Starting and stopping the control plane, in-process.
//!
//! Tests embed it as a library (one per test, on port 0) and the `sluice-localcp` binary wraps the same
//! type for demos and multi-process suites. Shutdown cancels open watch streams first so that axum's
//! graceful shutdown does not wait for their timeouts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::error::Cause;
use super::http::{Shared, router};
use super::kubeconfig;
use super::store::{DEFAULT_HISTORY, Store};

/// How to run the control plane.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one. Loopback only.
    pub addr: SocketAddr,
    /// Watch events kept before older resourceVersions answer 410.
    pub history: usize,
    /// Period of watch bookmarks.
    pub bookmark_interval: Duration,
    /// Where the process runner writes each pod's output as `<pod>.log`, served as the pods' `log`
    /// subresource (`kubectl logs`); `None` answers 404 as for a pod on no node.
    pub pod_log_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: DEFAULT_HISTORY,
            bookmark_interval: Duration::from_secs(10),
            pod_log_dir: None,
        }
    }
}

/// A running control plane.
pub struct ControlPlane {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<std::io::Result<()>>,
}

impl ControlPlane {
    /// Binds and starts serving.
    pub async fn start(config: Config) -> std::io::Result<Self> {
        if !config.addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the control plane listens on loopback only",
            ));
        }
        let listener = TcpListener::bind(config.addr).await?;
        let addr = listener.local_addr()?;
        let mut shared = Shared::new(Store::new(config.history), config.bookmark_interval, addr.to_string());
        shared.pod_log_dir = config.pod_log_dir;
        let shared = Arc::new(shared);
        let app = router(Arc::clone(&shared));
        let stop = shared.shutdown.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await
        });
        tracing::info!(%addr, "local control plane listening");
        Ok(Self { addr, shared, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig pointing at this server (default namespace `default`).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        kubeconfig::write(path, &self.url(), "default")
    }

    /// A kube client for this server (default namespace `default`).
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        let uri: http::Uri = self.url().parse()?;
        Ok(kube::Client::try_from(kube::Config::new(uri))?)
    }

    /// Registers a validation hook for objects of `group`/`kind`, run on every create and update.
    pub fn set_validator<F>(&self, group: &str, kind: &str, f: F)
    where
        F: Fn(&serde_json::Value) -> Result<(), Vec<Cause>> + Send + Sync + 'static,
    {
        self.shared.store().set_validator(group, kind, Arc::new(f));
    }

    /// Runs `f` on the store under its lock (for test setup and inspection; writes wake watches).
    pub fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        self.shared.write(f)
    }

    /// Stops serving: ends open watches, then waits for the server task.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.shared.shutdown.cancel();
        match tokio::time::timeout(Duration::from_secs(10), self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(join)) => Err(std::io::Error::other(join)),
            Err(_) => Err(std::io::Error::other("the control plane did not stop within 10 s")),
        }
    }
}
