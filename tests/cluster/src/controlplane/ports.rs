//! Loopback ports for the components the harness starts (etcd, the API server, the controller
//! manager, the scheduler, the pods' admin ports).
//!
//! Why not port 0: the kernel hands out a port-0 bind from the same range as the source ports of
//! outgoing connections (`net.ipv4.ip_local_port_range`, 32768-60999 by default), and a test run
//! opens thousands of those (to LocalStack, the API servers, the sinks). A port picked that way and
//! handed to a component a moment later was, in one run of the test command, taken in between by
//! an outgoing connection: kube-controller-manager failed with `bind: address already in use`. A
//! port below that range is never a connection's source port, so only another pick could take it,
//! and picks are random over some ten thousand ports.

use std::net::TcpListener;

use anyhow::Result;

/// The lowest port picked; the range ends where the kernel's ephemeral range begins.
const LOWEST: u16 = 20_000;
/// Picks tried before falling back to a port-0 bind.
const TRIES: usize = 200;

/// A loopback port free now, below the kernel's ephemeral range when there is room there.
pub fn free_port() -> Result<u16> {
    let ephemeral_low = ephemeral_low().unwrap_or(32_768);
    if ephemeral_low > LOWEST + 1_000 {
        for _ in 0..TRIES {
            let port = fastrand::u16(LOWEST..ephemeral_low);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The first port of the kernel's ephemeral range (Linux), if it can be read.
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picked_port_is_below_the_ephemeral_range_and_free() {
        let port = free_port().expect("a free port");
        if let Some(low) = ephemeral_low().filter(|low| *low > LOWEST + 1_000) {
            assert!((LOWEST..low).contains(&port), "{port} not in {LOWEST}..{low}");
        }
        TcpListener::bind(("127.0.0.1", port)).expect("still free");
    }
}
