//! A CloudEvents receiver on loopback that records what it got, in arrival order.
//!
//! Bodies steer it: one containing `poison` is answered 400 (non-transient), `slow...` is held for a minute
//! (to catch a reader mid-delivery), `wait-<ms>-...` is answered 200 after that many milliseconds,
//! anything else 200 at once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

#[derive(Clone, Debug)]
pub struct Received {
    pub id: String,
    pub body: String,
}

#[derive(Clone, Default)]
pub struct SinkServer {
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl SinkServer {
    pub async fn start() -> (Self, SocketAddr) {
        let server = Self::default();
        let app = Router::new().route("/", post(receive)).with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn receive(State(server): State<SinkServer>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let body = String::from_utf8_lossy(&body).into_owned();
    if body.contains("poison") {
        return StatusCode::BAD_REQUEST;
    }
    if body.starts_with("slow") {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    if let Some(ms) = body.strip_prefix("wait-").and_then(|rest| rest.split('-').next()?.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let id = headers.get("ce-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    server.received.lock().unwrap().push(Received { id, body });
    StatusCode::OK
}
