//! The admin servers' listening socket: one socket for IPv4 and IPv6.
//!
//! Why here: the reader and the operator both serve `/metrics` and probes, and on an IPv6 (or
//! dual-stack) cluster the kubelet's probes and Prometheus' scrapes reach the pod's IPv6 address,
//! while on an IPv4 cluster they reach its IPv4 one. Binding `[::]` with `IPV6_V6ONLY` off takes
//! both on one socket, whatever the host's default (`net.ipv6.bindv6only`). A host without IPv6
//! (the kernel refuses the IPv6 socket or address) falls back to `0.0.0.0` on the same port, with
//! one INFO line. Any other address is bound as given.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};
use tokio::net::TcpListener;

/// Binds `addr` for an admin server; `[::]:PORT` serves IPv4 and IPv6 on one socket.
pub async fn bind_admin(addr: SocketAddr) -> io::Result<TcpListener> {
    if !(addr.is_ipv6() && addr.ip().is_unspecified()) {
        return TcpListener::bind(addr).await;
    }
    match dual_stack(addr) {
        Ok(listener) => Ok(listener),
        Err(e) if no_ipv6(&e) => {
            let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port()));
            tracing::info!(requested = %addr, bound = %v4, error = %e, "this host has no IPv6: the admin server listens on IPv4 only");
            TcpListener::bind(v4).await
        }
        Err(e) => Err(e),
    }
}

fn dual_stack(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::IPV6, Type::STREAM, None)?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// The errors a kernel without IPv6 (or with IPv6 disabled) gives for an IPv6 socket or bind.
fn no_ipv6(e: &io::Error) -> bool {
    const EAFNOSUPPORT: i32 = 97;
    const EADDRNOTAVAIL: i32 = 99;
    const EPROTONOSUPPORT: i32 = 93;
    matches!(e.raw_os_error(), Some(EAFNOSUPPORT | EADDRNOTAVAIL | EPROTONOSUPPORT))
        || e.kind() == io::ErrorKind::AddrNotAvailable
        || e.kind() == io::ErrorKind::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_socket_answers_on_ipv4_and_ipv6_loopback() {
        let listener = bind_admin("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = listener.accept().await.unwrap();
            }
        });
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("IPv4 loopback");
        tokio::net::TcpStream::connect(("::1", port)).await.expect("IPv6 loopback");
        accept.await.unwrap();
    }

    #[tokio::test]
    async fn other_addresses_are_bound_as_given() {
        let listener = bind_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
        assert!(listener.local_addr().unwrap().is_ipv4());
    }

    #[test]
    fn missing_ipv6_is_recognised() {
        assert!(no_ipv6(&io::Error::from_raw_os_error(97)));
        assert!(!no_ipv6(&io::Error::from_raw_os_error(98)), "address in use is a real error");
    }
}
