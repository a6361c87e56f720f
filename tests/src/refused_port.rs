//! An endpoint that is down and comes back on the same port: a port of 127.0.0.1 that refuses
//! connections (bound, not listening, so no other process can take it meanwhile), until
//! [`RefusedPort::forward_to`] listens on it and forwards every connection, byte for byte, to the
//! real server (LocalStack's S3, say).
//!
//! Why a forwarder and not the server itself on the port: the servers the suites use (LocalStack)
//! listen where they were started; a spec that names this port's URL reaches them through it once
//! the outage is over, without a change to the spec or a restart of the reader.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::poll::{Check, until};

pub struct RefusedPort {
    addr: SocketAddr,
    /// The socket holding the port while connections are refused.
    held: Option<TcpSocket>,
}

impl RefusedPort {
    /// A free port of 127.0.0.1, refusing connections from now on.
    pub fn new() -> Result<Self> {
        let socket = TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        Ok(Self { addr: socket.local_addr()?, held: Some(socket) })
    }

    /// `http://127.0.0.1:PORT`, for an endpoint setting.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop refusing: listen on the port and forward each connection to `upstream` (`host:port`)
    /// until the runtime ends.
    pub async fn forward_to(&mut self, upstream: &str) -> Result<()> {
        drop(self.held.take());
        let addr = self.addr;
        let listener = until(Duration::from_secs(10), Duration::from_millis(100), || async {
            Ok(match TcpListener::bind(addr).await {
                Ok(listener) => Check::Met(listener),
                Err(e) => Check::NotYet(format!("cannot bind {addr} again: {e}")),
            })
        })
        .await?;
        tokio::spawn(forward(listener, upstream.to_owned()));
        Ok(())
    }
}

/// Forwards every connection to `listener` to `upstream`, byte for byte.
async fn forward(listener: TcpListener, upstream: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let upstream = upstream.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}
