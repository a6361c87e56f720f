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
//! Where the time goes can be watched: a [`Stamps`] callback sees every chunk with when it was
//! read, when it was due, when the timer released it and when it was written, so a bench can tell
//! the delay it asked for from the proxy's own lateness. And a proxy can run on a runtime of its
//! own ([`LatencyProxy::start_on`]): on a shared runtime a chunk whose moment has come waits behind
//! whatever else that runtime is busy with (a sink taking thousands of requests a second), which
//! is the harness's time, not the network's.
//!
//! Also compiled into `sluice-reader`'s `bench_vs_loop` example (by path), so it uses only crates
//! both have: tokio, tokio-util, fastrand; `precise_timer` comes along by path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[path = "precise_timer.rs"]
mod precise_timer;

/// Chunks in the air per direction of one connection; the reader side waits when it is full, which
/// bounds the proxy's memory like a TCP window would.
const CHUNKS_IN_AIR: usize = 256;
const CHUNK_BYTES: usize = 64 * 1024;

/// Delay added to each delayed direction.
#[derive(Clone, Copy, Debug)]
pub struct Delay {
    /// What each delayed direction adds: half the round trip, or all of it on the answers alone.
    pub one_way: Duration,
    /// Each chunk's delay is `one_way` plus a uniform draw in `[-jitter, +jitter]` (floored at zero).
    pub jitter: Duration,
    /// Which directions are delayed.
    pub legs: Legs,
    /// Start each wait early by the proxy's own recent lateness, so chunks leave when they are due
    /// on average rather than a thread wake-up or two after it (see [`Delay::on_answers`]).
    pub keep_time: bool,
}

/// Which directions of a connection carry the delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Legs {
    /// Half the round trip each way, as on a network.
    Both,
    /// The whole round trip on the way back, requests pass at once.
    Answers,
}

impl Delay {
    /// A round trip of `rtt`, split evenly, with `jitter_percent` of the one-way delay as jitter.
    pub fn round_trip(rtt: Duration, jitter_percent: u32) -> Self {
        let one_way = rtt / 2;
        Self { one_way, jitter: one_way * jitter_percent / 100, legs: Legs::Both, keep_time: false }
    }

    /// A round trip of `rtt` added to the answers alone (the same jitter as one leg of
    /// [`round_trip`](Self::round_trip)), each wait started early by the proxy's own lateness.
    /// For request/answer protocols the caller sees the same round trip, but each exchange costs
    /// the proxy two thread wake-ups fewer (a delayed chunk needs the timer thread, then the task's
    /// runtime), and what is left of its wake-ups is kept out of the delay: on two shared cores a
    /// wake-up costs a few tenths of a millisecond, a fifth of a 5 ms round trip over four of
    /// them. A long poll's server sees the request sooner; nothing the benches time depends on it.
    pub fn on_answers(rtt: Duration, jitter_percent: u32) -> Self {
        Self { one_way: rtt, jitter: rtt / 2 * jitter_percent / 100, legs: Legs::Answers, keep_time: true }
    }

    /// Whether the direction is delayed at all.
    fn delays(&self, upstream: bool) -> bool {
        !(upstream && self.legs == Legs::Answers)
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

/// One chunk's way through the proxy, told to a [`Stamps`] callback once it is written out.
pub struct Stamp<'a> {
    /// The proxied connection (numbered from 0 per proxy).
    pub connection: u64,
    /// Client to server (a request) rather than back.
    pub upstream: bool,
    pub bytes: &'a [u8],
    /// Read from its source.
    pub read: Instant,
    /// The moment it was to leave (read + delay, never before the chunk ahead).
    pub due: Instant,
    /// The timer released it (late by the timer thread's wake-up).
    pub fired: Instant,
    /// Written to its destination (late by the wait for the runtime to poll the task, too).
    pub written: Instant,
}

/// Watches every chunk's stamps (e.g. to time request/answer exchanges). Called on the proxy's
/// runtime: keep it cheap.
pub type Stamps = Arc<dyn Fn(&Stamp<'_>) + Send + Sync>;

/// What a proxy reports to, besides forwarding.
#[derive(Clone, Default)]
pub struct Watch {
    pub tap: Option<Tap>,
    pub stamps: Option<Stamps>,
}

/// A running proxy; it stops (and drops its connections) when this is dropped.
pub struct LatencyProxy {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl LatencyProxy {
    /// Listen on a free port of 127.0.0.1 and forward every connection to `upstream`.
    pub async fn start(upstream: SocketAddr, delay: Delay, tap: Option<Tap>) -> std::io::Result<Self> {
        Self::start_on(&Handle::current(), upstream, delay, Watch { tap, stamps: None })
    }

    /// As [`start`](Self::start), with every connection's tasks on `runtime` and `watch` told.
    pub fn start_on(
        runtime: &Handle,
        upstream: SocketAddr,
        delay: Delay,
        watch: Watch,
    ) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        // Registered with the reactor of the runtime that will poll it.
        runtime.spawn(async move {
            if let Ok(listener) = TcpListener::from_std(listener) {
                accept(listener, upstream, delay, watch, stopped).await;
            }
        });
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
    watch: Watch,
    stop: CancellationToken,
) {
    // Per direction, shared by the proxy's connections: how early to start a wait.
    let leads = [Arc::new(Lead::default()), Arc::new(Lead::default())];
    for connection in 0.. {
        let client = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let Ok((client, _)) = client else { continue };
        let (stop, watch) = (stop.clone(), watch.clone());
        let leads = leads.clone();
        tokio::spawn(async move {
            // A refused upstream closes the client's connection, as the server itself would.
            let Ok(server) = TcpStream::connect(upstream).await else { return };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let [up_lead, down_lead] = leads;
            let up = Direction {
                connection,
                upstream: true,
                tap: watch.tap,
                stamps: watch.stamps.clone(),
                lead: up_lead,
            };
            let down =
                Direction { connection, upstream: false, tap: None, stamps: watch.stamps, lead: down_lead };
            tokio::select! {
                _ = async {
                    tokio::join!(
                        pipe(client_read, server_write, delay, up),
                        pipe(server_read, client_write, delay, down),
                    )
                } => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// One direction of one connection, and who watches it.
struct Direction {
    connection: u64,
    upstream: bool,
    tap: Option<Tap>,
    stamps: Option<Stamps>,
    lead: Arc<Lead>,
}

/// How late the proxy's chunks of one direction have been leaving (a moving average, in
/// microseconds): with `keep_time`, each wait starts that much early.
#[derive(Default)]
struct Lead {
    micros: AtomicU64,
}

impl Lead {
    /// Weight of the newest lateness in the average.
    const NEWEST: f64 = 0.125;

    fn get(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// A chunk aimed `lead` early left `late` after it was due (negative: early): the lead that
    /// would have made it leave on time is `lead + late`. Never more than `cap`.
    fn learn(&self, lead: Duration, due: Instant, written: Instant, cap: Duration) {
        let late = written.saturating_duration_since(due).as_secs_f64()
            - due.saturating_duration_since(written).as_secs_f64();
        let wanted = (lead.as_secs_f64() + late).max(0.0);
        let old = lead.as_secs_f64();
        let next = (old + Self::NEWEST * (wanted - old)).min(cap.as_secs_f64());
        self.micros.store((next * 1e6) as u64, Ordering::Relaxed);
    }
}

/// One direction: read chunks, stamp each with its departure time, write it out at that time; at
/// end of input, send what is in the air, then half-close.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Delay, direction: Direction) {
    let (chunks, mut in_air) = mpsc::channel::<(Instant, Instant, Vec<u8>)>(CHUNKS_IN_AIR);
    let Direction { connection, upstream, tap, stamps, lead } = direction;
    let delayed = delay.delays(upstream);
    let read = async move {
        let mut last = Instant::now();
        loop {
            let mut buf = vec![0; CHUNK_BYTES];
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let read = Instant::now();
            buf.truncate(n);
            if let Some(tap) = &tap {
                tap(&buf);
            }
            let wait = if delayed { delay.draw() } else { Duration::ZERO };
            last = (read + wait).max(last);
            if chunks.send((read, last, buf)).await.is_err() {
                return;
            }
        }
    };
    let write = async move {
        while let Some((read, due, chunk)) = in_air.recv().await {
            let early = if delay.keep_time && delayed { lead.get() } else { Duration::ZERO };
            let fired = precise_timer::sleep_until(due.checked_sub(early).unwrap_or(due).max(read)).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            let written = Instant::now();
            if delay.keep_time && delayed {
                lead.learn(early, due, written, delay.one_way / 4);
            }
            if let Some(stamps) = &stamps {
                stamps(&Stamp { connection, upstream, bytes: &chunk, read, due, fired, written });
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
        echoes(Delay::round_trip(Duration::from_millis(40), 10)).await;
    }

    /// The same with the whole round trip on the answers, kept on time: still at least the round
    /// trip, several exchanges in a row (the lead it learns never makes a chunk leave before its
    /// read plus the part of the delay the lead may take).
    #[tokio::test]
    async fn answers_carry_the_whole_round_trip() {
        for _ in 0..3 {
            echoes(Delay::on_answers(Duration::from_millis(40), 10)).await;
        }
    }

    async fn echoes(delay: Delay) {
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
        let rtt = match delay.legs {
            Legs::Both => delay.one_way * 2,
            Legs::Answers => delay.one_way,
        };
        let proxy = LatencyProxy::start_on(
            &Handle::current(),
            upstream,
            delay,
            Watch { tap: Some(tap), stamps: None },
        )
        .unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        let message: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let started = Instant::now();
        c.write_all(&message).await.unwrap();
        let mut back = vec![0; message.len()];
        c.read_exact(&mut back).await.unwrap();
        let took = started.elapsed();
        assert_eq!(back, message);
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), message.len());
        // Lower bound only: the delayed directions wait at least their delay - jitter - lead (a lead
        // is at most a quarter of the delay).
        let least = if delay.keep_time { rtt * 3 / 5 } else { rtt * 9 / 10 };
        assert!(took >= least, "round trip took {took:?}, expected at least {least:?}");
    }
}
