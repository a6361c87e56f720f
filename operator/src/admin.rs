//! The operator's admin HTTP server: `/metrics`, `/healthz`, `/readyz`.
//!
//! Why separate from the controller: probes and scrapes must answer while the controller is busy,
//! standing by for the Lease, or draining. `/healthz` says the process serves HTTP; `/readyz`
//! says it finished starting (client built, metrics registered), standby replicas included, since
//! the operator takes no traffic and a standby must not be restarted for waiting. It also answers
//! not ready while the API server throttles this replica (`throttle`): nothing routes to the
//! operator, so this only shows the episode in `kubectl get pods`; `/healthz` stays ok, so the
//! kubelet does not restart a replica that is merely waiting for its Retry-After.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub struct AdminState {
    pub registry: Registry,
    pub ready: AtomicBool,
}

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        ),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string()),
    }
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Binds `addr` and serves until `shutdown` is cancelled.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = sluice_logs::listen::bind_admin(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "admin server listening");
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use crate::metrics::Metrics;

    async fn get_path(state: Arc<AdminState>, path: &str) -> (StatusCode, String) {
        let request = Request::builder().uri(path).body(Body::empty());
        let Ok(request) = request else { panic!("bad request") };
        let Ok(response) = router(state).oneshot(request).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe(std::time::Duration::from_millis(1), Some("conflict"));
        let state = Arc::new(AdminState { registry, ready: AtomicBool::new(false) });
        assert_eq!(get_path(state.clone(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(get_path(state.clone(), "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        state.ready.store(true, Ordering::Relaxed);
        assert_eq!(get_path(state.clone(), "/readyz").await.0, StatusCode::OK);
        let (code, text) = get_path(state, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(text.contains("sluice_operator_reconcile_failures_total{reason=\"conflict\"} 1"), "{text}");
    }
}
