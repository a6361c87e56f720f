//! A TCP proxy on 127.0.0.1 that adds a delay to every byte in each direction, with jitter: real SQS
//! and real sinks are 5-50 ms away, LocalStack and a local sink well under one.
//!
//! Why written here: Toxiproxy is a Go server (not in the reachable registries), its Rust clients
//! need that server, the Rust port `noxious` is unmaintained, and `tc netem` on loopback would slow
//! every other test suite sharing LocalStack on this machine. This is a delay line and nothing
//! more: each chunk read is stamped with the moment it may leave (now + one-way delay +- jitter,
//! never before the chunk ahead of it, as TCP keeps order) and written out at that moment, so the
//! delay does not limit bandwidth: a request/response pair costs one round trip, as on a network.
//! The moment is kept by `precise_timer`, not tokio's millisecond timer, which would add about a
//! millisecond per chunk and direction: a fifth of a 5 ms round trip.
//!
//! Also compiled into `sluice-reader`'s `bench_vs_loop` example (by path), so it uses only crates
//! both have: tokio, tokio-util, fastrand; `precise_timer` comes along by path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[path = "precise_timer.rs"]
mod precise_timer;

/// Chunks in the air per direction of one connection; the reader side waits when it is full, which
/// bounds the proxy's memory like a TCP window would.
const CHUNKS_IN_AIR: usize = 256;
const CHUNK_BYTES: usize = 64 * 1024;

/// Delay added to each direction.
#[derive(Clone, Copy, Debug)]
pub struct Delay {
    /// Half the round trip the proxy adds.
    pub one_way: Duration,
    /// Each chunk's delay is `one_way` plus a uniform draw in `[-jitter, +jitter]` (floored at zero).
    pub jitter: Duration,
}

impl Delay {
    /// A round trip of `rtt`, split evenly, with `jitter_percent` of the one-way delay as jitter.
    pub fn round_trip(rtt: Duration, jitter_percent: u32) -> Self {
        let one_way = rtt / 2;
        Self { one_way, jitter: one_way * jitter_percent / 100 }
    }

    fn draw(&self) -> Duration {
        if self.jitter.is_zero() {
            return self.one_way;
        }
        let span = self.jitter.as_micros() as i64;
        let offset = fastrand::i64(-span..=span);
        let micros = (self.one_way.as_micros() as i64 + offset).max(0);
        Duration::from_micros(micros as u64)
    }
}

/// Watches the bytes a client sends upstream (e.g. to count requests by their headers). Called with
/// each chunk as read; a pattern can straddle two chunks, so counts from it are close, not exact.
pub type Tap = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// A running proxy; it stops (and drops its connections) when this is dropped.
pub struct LatencyProxy {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl LatencyProxy {
    /// Listen on a free port of 127.0.0.1 and forward every connection to `upstream`.
    pub async fn start(upstream: SocketAddr, delay: Delay, tap: Option<Tap>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, upstream, delay, tap, stop.clone()));
        Ok(Self { addr, stop })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for an endpoint setting.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    delay: Delay,
    tap: Option<Tap>,
    stop: CancellationToken,
) {
    loop {
        let client = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let Ok((client, _)) = client else { continue };
        let (stop, tap) = (stop.clone(), tap.clone());
        tokio::spawn(async move {
            // A refused upstream closes the client's connection, as the server itself would.
            let Ok(server) = TcpStream::connect(upstream).await else { return };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::select! {
                _ = async {
                    tokio::join!(
                        pipe(client_read, server_write, delay, tap),
                        pipe(server_read, client_write, delay, None),
                    )
                } => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// One direction: read chunks, stamp each with its departure time, write it out at that time; at
/// end of input, send what is in the air, then half-close.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Delay, tap: Option<Tap>) {
    let (chunks, mut in_air) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_IN_AIR);
    let read = async move {
        let mut last = Instant::now();
        loop {
            let mut buf = vec![0; CHUNK_BYTES];
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.truncate(n);
            if let Some(tap) = &tap {
                tap(&buf);
            }
            last = (Instant::now() + delay.draw()).max(last);
            if chunks.send((last, buf)).await.is_err() {
                return;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = in_air.recv().await {
            precise_timer::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real echo server behind the proxy: bytes come back intact and in order, and a request/answer
    /// exchange takes at least the configured round trip.
    #[tokio::test]
    async fn echoes_through_the_delay_in_order() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        let tap: Tap = Arc::new(move |b: &[u8]| {
            counter.fetch_add(b.len(), std::sync::atomic::Ordering::Relaxed);
        });
        let rtt = Duration::from_millis(40);
        let proxy = LatencyProxy::start(upstream, Delay::round_trip(rtt, 10), Some(tap)).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        let message: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let started = Instant::now();
        c.write_all(&message).await.unwrap();
        let mut back = vec![0; message.len()];
        c.read_exact(&mut back).await.unwrap();
        let took = started.elapsed();
        assert_eq!(back, message);
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), message.len());
        // Lower bound only: each direction waits at least one_way - jitter.
        assert!(took >= rtt * 9 / 10, "round trip took {took:?}, expected at least {:?}", rtt * 9 / 10);
    }
}
