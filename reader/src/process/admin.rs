//! The admin server: `/metrics` for Prometheus, `/healthz` for liveness, `/readyz` for readiness.
//!
//! Why ready means "the queue answered": a reader that cannot reach SQS should not count as a
//! running replica, and one that is draining should stop counting before it exits. The bound
//! address is printed (and optionally written to a file) because tests bind port 0.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::process::error::{Error, Result};
use crate::process::metrics::Metrics;

#[derive(Clone)]
pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
}

impl Admin {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics, ready: Arc::new(AtomicBool::new(false)) }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        self.metrics.set_ready(ready);
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self.clone())
    }

    /// Bind, announce the address, and serve until `shutdown`.
    pub async fn bind(&self, addr: &str, addr_file: Option<&Path>) -> Result<(SocketAddr, Serving)> {
        let listener = match addr.parse::<SocketAddr>() {
            Ok(parsed) => sluice_logs::listen::bind_admin(parsed).await,
            Err(_) => TcpListener::bind(addr).await,
        }
        .map_err(Error::Admin)?;
        let bound = listener.local_addr().map_err(Error::Admin)?;
        println!("sluice-reader admin listening on {bound}");
        if let Some(path) = addr_file {
            std::fs::write(path, bound.to_string()).map_err(Error::Admin)?;
        }
        Ok((bound, Serving { listener, router: self.router() }))
    }
}

/// A bound server not yet running.
pub struct Serving {
    listener: TcpListener,
    router: Router,
}

impl Serving {
    pub async fn run(self, shutdown: CancellationToken) {
        let served = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "admin server failed");
        }
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], admin.metrics.encode())
}

/// The status is the readiness; the text adds what a person should know that does not change it:
/// a Kubernetes API that does not take this reader's writes (delivery needs no API call, so an
/// at-least-once reader stays ready through an API server outage; docs/control-plane-faults.md).
async fn readyz(State(admin): State<Admin>) -> impl IntoResponse {
    let (status, word) = if admin.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    };
    match admin.metrics.health.api_note() {
        Some(note) => (status, format!("{word}; {note}")),
        None => (status, word.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_text(addr: SocketAddr, path: &str) -> (u16, String) {
        let answer = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics_on_loopback() {
        let admin = Admin::new(Arc::new(Metrics::new()));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("addr");
        let (addr, serving) = admin.bind("127.0.0.1:0", Some(&file)).await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), addr.to_string());
        let stop = CancellationToken::new();
        let server = tokio::spawn(serving.run(stop.clone()));
        assert_eq!(get_text(addr, "/healthz").await, (200, "ok".into()));
        assert_eq!(get_text(addr, "/readyz").await.0, 503);
        admin.set_ready(true);
        assert_eq!(get_text(addr, "/readyz").await.0, 200);
        admin.metrics.received("http://q/orders", 1, 4, &[], 0);
        let (status, text) = get_text(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(text.contains("sluice_reader_received_messages_total{queue=\"orders\"} 1"), "{text}");
        assert!(text.contains("sluice_reader_ready 1"), "{text}");
        stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), server).await.unwrap().unwrap();
    }
}
