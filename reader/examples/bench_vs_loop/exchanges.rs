//! Where a ReceiveMessage's time goes, as the latency proxy sees it: each exchange on a proxied
//! connection split into the request leg (proxy read the request to proxy wrote it to the
//! backend), the backend (written to it to its answer's first bytes read back, so the stand-in's
//! HTTP server, its runtime and loopback TCP as well as its handler) and the answer leg (read
//! back to written to the consumer). Each leg's lateness beyond the delay asked for is split
//! again: the precise timer's wake-up and the wait for the proxy's runtime to poll the task.
//!
//! Why at the proxy: it is the one place every consumer's calls pass, timed by one clock, without
//! trusting any consumer's own figures. What it cannot see is the consumer's side (its SDK, its
//! runtime, loopback to the proxy): that is the consumer's own receive time minus the exchange
//! here. Bench only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::rtt::latency_proxy::Stamp;

const RECEIVE: &[u8] = b"AmazonSQS.ReceiveMessage";

/// The exchanges of one proxy (one consumer's run).
#[derive(Default)]
pub struct Exchanges {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Per connection: the exchange in progress.
    open: HashMap<u64, Open>,
    done: Vec<Exchange>,
}

struct Open {
    receive: bool,
    request: Leg,
    answer: Option<Leg>,
}

/// One direction of one exchange: its chunks from the first read to the last written.
#[derive(Clone, Copy)]
struct Leg {
    first_read: Instant,
    last_due: Instant,
    last_written: Instant,
    chunks: u32,
    /// Summed over its chunks: timer wake-up late, and runtime poll (plus the write) late.
    timer_late: Duration,
    poll_late: Duration,
    /// Its last chunk written after it was due, ms (negative: before; a proxy that keeps time
    /// starts its waits early by its own lateness).
    late_ms: f64,
}

impl Leg {
    fn new(s: &Stamp<'_>) -> Self {
        Self {
            first_read: s.read,
            last_due: s.due,
            last_written: s.written,
            chunks: 1,
            timer_late: s.fired.saturating_duration_since(s.due),
            poll_late: s.written.saturating_duration_since(s.fired),
            late_ms: signed_ms(s.due, s.written),
        }
    }

    fn add(&mut self, s: &Stamp<'_>) {
        self.last_due = s.due;
        self.last_written = s.written;
        self.chunks += 1;
        self.timer_late += s.fired.saturating_duration_since(s.due);
        self.poll_late += s.written.saturating_duration_since(s.fired);
        self.late_ms = signed_ms(s.due, s.written);
    }

    /// First read to last written.
    fn took(&self) -> Duration {
        self.last_written - self.first_read
    }

    /// Of that, what was asked for: the delay drawn (with jitter, never before the chunk ahead).
    fn asked(&self) -> Duration {
        self.last_due.saturating_duration_since(self.first_read)
    }
}

/// One finished ReceiveMessage exchange.
struct Exchange {
    request: Leg,
    answer: Leg,
}

impl Exchanges {
    /// The proxy's callback: every chunk, once written out.
    pub fn observe(&self, s: &Stamp<'_>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { open, done } = &mut *inner;
        if s.upstream {
            let receive = find(s.bytes, RECEIVE);
            match open.get_mut(&s.connection) {
                // More of the same request.
                Some(o) if o.answer.is_none() => {
                    o.receive |= receive;
                    o.request.add(s);
                }
                // A new request: the one before it on this connection is finished.
                previous => {
                    if let Some(o) = previous.map(|o| std::mem::replace(o, Open::new(s, receive))) {
                        o.finish(done);
                    } else {
                        open.insert(s.connection, Open::new(s, receive));
                    }
                }
            }
        } else if let Some(o) = open.get_mut(&s.connection) {
            match &mut o.answer {
                Some(leg) => leg.add(s),
                None => o.answer = Some(Leg::new(s)),
            }
        }
    }

    /// The finished receives' figures, and those still open whose answer is out.
    pub fn figures(&self) -> Option<Figures> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let done = &inner.done;
        if done.is_empty() {
            return None;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let each = |f: &dyn Fn(&Exchange) -> f64| -> Spread { Spread::of(done.iter().map(f).collect()) };
        let n = done.len() as f64;
        let sum = |f: &dyn Fn(&Exchange) -> f64| done.iter().map(f).sum::<f64>() / n;
        Some(Figures {
            receives: done.len(),
            total: each(&|e| ms(e.answer.last_written - e.request.first_read)),
            request_leg: each(&|e| ms(e.request.took())),
            backend: each(&|e| ms(e.answer.first_read.saturating_duration_since(e.request.last_written))),
            answer_leg: each(&|e| ms(e.answer.took())),
            asked_ms: sum(&|e| ms(e.request.asked()) + ms(e.answer.asked())),
            timer_late_ms: sum(&|e| ms(e.request.timer_late) + ms(e.answer.timer_late)),
            poll_late_ms: sum(&|e| ms(e.request.poll_late) + ms(e.answer.poll_late)),
            late_ms: sum(&|e| e.request.late_ms + e.answer.late_ms),
            request_chunks: sum(&|e| f64::from(e.request.chunks)),
            answer_chunks: sum(&|e| f64::from(e.answer.chunks)),
        })
    }
}

impl Open {
    fn new(s: &Stamp<'_>, receive: bool) -> Self {
        Self { receive, request: Leg::new(s), answer: None }
    }

    fn finish(self, done: &mut Vec<Exchange>) {
        if let (true, Some(answer)) = (self.receive, self.answer) {
            done.push(Exchange { request: self.request, answer });
        }
    }
}

/// `to - from` in milliseconds, negative when `to` is earlier.
fn signed_ms(from: Instant, to: Instant) -> f64 {
    (to.saturating_duration_since(from).as_secs_f64() - from.saturating_duration_since(to).as_secs_f64())
        * 1000.0
}

fn find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Mean, median and p90 of a set of milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spread {
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self { mean: f64::NAN, median: f64::NAN, p90: f64::NAN };
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self { mean: v.iter().sum::<f64>() / v.len() as f64, median: at(0.5), p90: at(0.9) }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}/{:.2})", self.mean, self.median, self.p90)
    }
}

/// One run's ReceiveMessage exchanges at the proxy, milliseconds (each leg: mean, median, p90).
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub receives: usize,
    /// The proxy read the request to it wrote the answer's last bytes.
    pub total: Spread,
    pub request_leg: Spread,
    pub backend: Spread,
    pub answer_leg: Spread,
    /// Means per exchange over both legs: the delay asked for, the timer's lateness and the
    /// runtime's (with the writes).
    pub asked_ms: f64,
    pub timer_late_ms: f64,
    pub poll_late_ms: f64,
    /// Both legs' last chunks written after they were due (negative: before), summed.
    pub late_ms: f64,
    pub request_chunks: f64,
    pub answer_chunks: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(connection: u64, upstream: bool, bytes: &[u8], at: Instant, ms: [u64; 4]) -> Stamp<'_> {
        let t = |m: u64| at + Duration::from_millis(m);
        Stamp {
            connection,
            upstream,
            bytes,
            read: t(ms[0]),
            due: t(ms[1]),
            fired: t(ms[2]),
            written: t(ms[3]),
        }
    }

    #[test]
    fn splits_a_receive_into_its_legs_and_skips_other_calls() {
        let x = Exchanges::default();
        let t = Instant::now();
        // A delete on connection 1, then a receive in two request chunks and two answer chunks.
        x.observe(&stamp(1, true, b"x-amz-target: AmazonSQS.DeleteMessageBatch", t, [0, 2, 3, 3]));
        x.observe(&stamp(1, false, b"HTTP/1.1 200", t, [4, 6, 6, 7]));
        x.observe(&stamp(1, true, b"x-amz-target: AmazonSQS.ReceiveMessage", t, [10, 12, 13, 13]));
        x.observe(&stamp(1, true, b"{}", t, [10, 12, 12, 14]));
        x.observe(&stamp(1, false, b"HTTP/1.1 200", t, [15, 17, 17, 18]));
        x.observe(&stamp(1, false, b"{\"Messages\":[]}", t, [15, 17, 18, 19]));
        assert!(x.figures().is_none(), "the receive is done only when the next request starts");
        x.observe(&stamp(1, true, b"x-amz-target: AmazonSQS.ReceiveMessage", t, [30, 32, 32, 32]));
        let f = x.figures().unwrap();
        assert_eq!(f.receives, 1);
        assert_eq!(
            (f.total.mean, f.request_leg.mean, f.backend.mean, f.answer_leg.mean),
            (9.0, 4.0, 1.0, 4.0)
        );
        assert_eq!((f.asked_ms, f.timer_late_ms, f.poll_late_ms, f.late_ms), (4.0, 2.0, 4.0, 4.0));
        assert_eq!((f.request_chunks, f.answer_chunks), (2.0, 2.0));
    }
}
