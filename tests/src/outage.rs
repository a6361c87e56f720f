//! A switchable TCP path to an endpoint: the outage suites point a reader at it, then cut it and
//! restore it on the same port.
//!
//! Why a forwarder and not stopping the service: LocalStack loses its queues on a restart, and the
//! suites must see what a reader does while *its* way to SQS or S3 is gone and the service itself
//! (and the test's own view of the queue) stays whole, as in a network partition or a regional
//! endpoint outage. While cut, the port is held by a socket bound but not listening: connections
//! are refused at once, and no other process can take the port meanwhile. Cutting also drops the
//! connections already open, so a client's pooled keep-alive connection fails as well.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::poll::{Check, until};

/// The path: up (forwarding every connection byte for byte) or cut (refusing every connection).
pub struct Outage {
    addr: SocketAddr,
    upstream: String,
    state: State,
}

enum State {
    Up(CancellationToken),
    /// The socket that holds the port: dropped on restore.
    Cut {
        _held: TcpSocket,
    },
}

impl Outage {
    /// A path to `upstream` (`http://host:port` or `host:port`) on a fresh loopback port, up.
    pub async fn start(upstream: &str) -> Result<Self> {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        tokio::spawn(forward(listener, upstream.clone(), stop.clone()));
        Ok(Self { addr, upstream, state: State::Up(stop) })
    }

    /// A path to `upstream` on a fresh loopback port, cut from the start (an endpoint that is down
    /// when the client first tries it): [`Self::restore`] brings it up.
    pub fn down(upstream: &str) -> Result<Self> {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let held = TcpSocket::new_v4()?;
        held.set_reuseaddr(true)?;
        held.bind("127.0.0.1:0".parse()?)?;
        Ok(Self { addr: held.local_addr()?, upstream, state: State::Cut { _held: held } })
    }

    /// The endpoint to give a client: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts the path: open connections are dropped, new ones refused.
    pub async fn cut(&mut self) -> Result<()> {
        if let State::Up(stop) = &self.state {
            stop.cancel();
            let addr = self.addr;
            // The forwarder drops its listener as it sees the cancel: bind as soon as the port is free.
            let reserved = until(Duration::from_secs(10), Duration::from_millis(20), || async {
                let socket = TcpSocket::new_v4()?;
                socket.set_reuseaddr(true)?;
                Ok(match socket.bind(addr) {
                    Ok(()) => Check::Met(socket),
                    Err(e) => Check::NotYet(format!("cannot hold {addr} while cut: {e}")),
                })
            })
            .await
            .context("cutting the path")?;
            self.state = State::Cut { _held: reserved };
        }
        Ok(())
    }

    /// Restores the path on the same port.
    pub async fn restore(&mut self) -> Result<()> {
        if let State::Cut { .. } = &self.state {
            self.state = State::Up(CancellationToken::new());
            let addr = self.addr;
            let listener = until(Duration::from_secs(10), Duration::from_millis(100), || async {
                Ok(match TcpListener::bind(addr).await {
                    Ok(listener) => Check::Met(listener),
                    Err(e) => Check::NotYet(format!("cannot bind {addr} again: {e}")),
                })
            })
            .await?;
            if let State::Up(stop) = &self.state {
                tokio::spawn(forward(listener, self.upstream.clone(), stop.clone()));
            }
        }
        Ok(())
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if let State::Up(stop) = &self.state {
            stop.cancel();
        }
    }
}

/// Forwards every connection to `listener` to `upstream` until `stop`, which also ends the
/// connections open.
async fn forward(listener: TcpListener, upstream: String, stop: CancellationToken) {
    loop {
        let (mut inbound, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => return,
            },
        };
        let (upstream, stop) = (upstream.clone(), stop.clone());
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(&upstream).await else { return };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
            }
        });
    }
}
