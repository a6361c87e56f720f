//! What the bench prints: one line per run, then medians and the ratios reader/baseline.
//!
//! Why per-round ratios as well as the ratio of medians: neighbouring runs share the machine's
//! mood (other jobs on the 2 shared cores), so a ratio within a round cancels more noise than one
//! between medians taken minutes apart. Both are printed; neither is hidden when it is bad.

use std::path::PathBuf;

use crate::exchanges::{Figures, Spread};
use crate::rtt::Calls;

/// A reader binary and the worker threads it is told to use (`None`: its own default).
pub struct ReaderVariant {
    pub path: PathBuf,
    pub workers: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumer {
    /// The reader binary at this index of `--reader`.
    Reader(usize),
    Baseline,
    /// Another team's consumer, for the peer table (peers.rs).
    Peer(crate::peers::Peer),
}

impl Consumer {
    pub fn label(self) -> String {
        match self {
            Self::Reader(0) => "reader".into(),
            Self::Reader(i) => format!("reader{}", i + 1),
            Self::Baseline => "baseline".into(),
            Self::Peer(p) => p.label().into(),
        }
    }
}

/// Resident memory of the consumer, KiB (from /proc/<pid>/status).
#[derive(Clone, Copy)]
pub struct Memory {
    /// VmRSS on the empty queue before the fill (only with `--idle-seconds`).
    pub idle_kib: Option<u64>,
    /// VmRSS when the queue was empty again.
    pub end_kib: u64,
    /// VmHWM: the peak over the whole run.
    pub peak_kib: u64,
}

pub struct Sample {
    pub consumer: Consumer,
    pub round: usize,
    /// Round trip the latency proxy added (0: none).
    pub rtt_ms: u64,
    /// Pollers while messages came: the reader's mean over its windows that brought messages (it
    /// adapts its count), else the count it ended with; the loop keeps its own.
    pub pollers: f64,
    /// The reader's mean time per ReceiveMessage that brought messages, as it measured it (RTT
    /// plus SQS's own time under this load); `None` for the loop and readers that do not log it.
    pub receive_ms: Option<f64>,
    /// The reader's poller windows, when it logs them.
    pub windows: Option<crate::rtt::Windows>,
    /// SQS calls through the proxy (all zero without one).
    pub calls: Calls,
    /// Its receives as the proxy timed them (behind a proxy).
    pub exchanges: Option<Figures>,
    /// The stand-in's own time per receive over the window (handler entry to answer), ms.
    pub backend_receive_ms: Option<f64>,
    pub memory: Memory,
    /// First event at the sink to the queue reported empty.
    pub seconds: f64,
    /// Consumer CPU (user + system) over that window.
    pub cpu_window: f64,
    /// The bench process's CPU over the window: the stand-in SQS, the latency proxy and the sink
    /// together, which share the machine's cores with the consumer.
    pub harness_cpu_window: f64,
    /// Consumer CPU since it started (start-up included).
    pub cpu_total: f64,
    /// Requests the sink accepted (duplicates included).
    pub accepted: u64,
    /// Messages in the queue at the start (all delivered and deleted at the end).
    pub messages: usize,
}

pub fn header(
    endpoint: &str,
    readers: &[ReaderVariant],
    messages: &[usize],
    runs: usize,
    pollers: usize,
    wait: i32,
    harness: &str,
) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench_vs_loop: {messages:?} messages per run, {runs} rounds, {pollers} pollers each, wait {wait} s"
    );
    println!("  SQS endpoint {endpoint}; harness {harness}");
    for (i, reader) in readers.iter().enumerate() {
        let workers = reader.workers.map_or(String::new(), |w| format!(" (TOKIO_WORKER_THREADS={w})"));
        println!("  {} {}{workers}", Consumer::Reader(i).label(), reader.path.display());
    }
    println!(
        "  {cores} cores; load average at start {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!(
        "{:<9} {:>4} {:>5} {:>8} {:>8} {:>12} {:>11} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "consumer",
        "rtt",
        "round",
        "seconds",
        "msgs/s",
        "cpu-s/window",
        "cpu-s/total",
        "cpu/1k",
        "bench/1k",
        "accepted",
        "pollers",
        "recv-fill",
        "del-fill",
        "calls/msg",
        "idle-MiB",
        "end-MiB",
        "peak-MiB"
    );
}

pub fn line(s: &Sample) {
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    println!(
        "{:<9} {:>4} {:>5} {:>8.2} {:>8.0} {:>12.2} {:>11.2} {:>8.3} {:>8.3} {:>8} {:>7.1} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}",
        s.consumer.label(),
        s.rtt_ms,
        s.round,
        s.seconds,
        s.rate(),
        s.cpu_window,
        s.cpu_total,
        s.cpu_window * 1000.0 / s.messages as f64,
        s.harness_cpu_window * 1000.0 / s.messages as f64,
        s.accepted,
        s.pollers,
        per(s.messages as u64, s.calls.receive),
        per(s.messages as u64, s.calls.delete),
        per(s.calls.total(), s.messages as u64),
        s.memory.idle_kib.map_or("-".into(), mib),
        mib(s.memory.end_kib),
        mib(s.memory.peak_kib),
    );
}

/// Where the run's receives spent their time, behind a proxy: each leg's mean (median/p90) in ms.
pub fn breakdown(s: &Sample) {
    let Some(x) = &s.exchanges else { return };
    let handler = s.backend_receive_ms.map_or("-".into(), |ms| format!("{ms:.3}"));
    let own = match s.receive_ms {
        Some(ms) => format!("; its own receive {ms:.2} ms, so {:.2} ms on its side", ms - x.total.mean),
        None => String::new(),
    };
    println!(
        "  {} receives at the proxy {}: {} ms = request leg {} + backend {} (handler {handler}) + answer leg {}; \
         asked {:.2}, left late by {:.3} (timer {:.3}, runtime {:.3}); chunks {:.1}/{:.1}{own}",
        s.consumer.label(),
        x.receives,
        x.total,
        x.request_leg,
        x.backend,
        x.answer_leg,
        x.asked_ms,
        x.late_ms,
        x.timer_late_ms,
        x.poll_late_ms,
        x.request_chunks,
        x.answer_chunks,
    );
    if let Some(w) = &s.windows {
        println!(
            "  {} pollers by window: {}; waited for room or rate {:.1} % of poller time",
            s.consumer.label(),
            w.counts,
            w.waited * 100.0
        );
    }
}

/// Per consumer, the medians over its runs of where a receive's time went (means per run).
fn breakdown_summary(samples: &[&Sample], c: Consumer) {
    let runs: Vec<(&Sample, &Figures)> = samples
        .iter()
        .filter(|s| s.consumer == c)
        .filter_map(|s| Some((*s, s.exchanges.as_ref()?)))
        .collect();
    if runs.is_empty() {
        return;
    }
    let of = |f: &dyn Fn(&Sample, &Figures) -> Option<f64>| {
        median(runs.iter().filter_map(|(s, x)| f(s, x)).collect())
    };
    let mean = |f: fn(&Figures) -> Spread| move |_: &Sample, x: &Figures| Some(f(x).mean);
    let total = of(&mean(|x| x.total));
    let own = of(&|s, _| s.receive_ms);
    let side = of(&|s, x| Some(s.receive_ms? - x.total.mean));
    println!(
        "  a receive, medians of the runs' means: {:<8} at the proxy {total:.2} ms = request leg {:.2} + backend {:.2} \
         (handler {:.3}) + answer leg {:.2}; asked {:.2}, left late by {:.3} (timer {:.3}, runtime {:.3}); answer chunks {:.1}; \
         its own receive {own:.2} ms, its side {side:.2} ms",
        c.label(),
        of(&mean(|x| x.request_leg)),
        of(&mean(|x| x.backend)),
        of(&|s, _| s.backend_receive_ms),
        of(&mean(|x| x.answer_leg)),
        of(&|_, x| Some(x.asked_ms)),
        of(&|_, x| Some(x.late_ms)),
        of(&|_, x| Some(x.timer_late_ms)),
        of(&|_, x| Some(x.poll_late_ms)),
        of(&|_, x| Some(x.answer_chunks)),
    );
}

/// `a / b` to two places, or `-` when nothing was counted (no proxy).
fn per(a: u64, b: u64) -> String {
    if a == 0 || b == 0 { "-".into() } else { format!("{:.2}", a as f64 / b as f64) }
}

impl Sample {
    /// Messages cleared per second over the window.
    fn rate(&self) -> f64 {
        self.messages as f64 / self.seconds
    }

    /// Consumer CPU-seconds per 10,000 messages.
    fn cpu_per_10k(&self) -> f64 {
        self.cpu_window * 10_000.0 / self.messages as f64
    }
}

/// Per round trip: the medians of both and their ratios, then (behind a proxy) each one's ratio to
/// the ceiling `pollers x 10 / RTT` of the pollers it chose (every poller receiving a full batch
/// once per round trip), and for a reader that logs its receive time, to `pollers x 10 / receive
/// time`: how much of each poller's turn went to its receive, whatever SQS's own time was.
/// `probed`: (RTT added, median ms of a sequential call through such a proxy) for each RTT.
pub fn summary(all: &[Sample], base_ms: f64, probed: &[(u64, f64)]) {
    let mut rtts: Vec<u64> = all.iter().map(|s| s.rtt_ms).collect();
    rtts.dedup();
    for rtt in rtts {
        let samples: Vec<&Sample> = all.iter().filter(|s| s.rtt_ms == rtt).collect();
        println!();
        println!("== round trip added: {rtt} ms");
        summary_of(&samples);
        if rtt > 0 {
            for c in consumers(&samples) {
                let pollers = median(samples.iter().filter(|s| s.consumer == c).map(|s| s.pollers).collect());
                // Per run (its rate against its own pollers and receive time), then the median.
                let by_receive: Vec<(f64, f64)> = samples
                    .iter()
                    .filter(|s| s.consumer == c)
                    .filter_map(|s| s.receive_ms.map(|ms| (ms, s.rate() / (s.pollers * 10.0 * 1000.0 / ms))))
                    .collect();
                let ceiling = pollers * 10.0 * 1000.0 / rtt as f64;
                let with_base = pollers * 10.0 * 1000.0 / (rtt as f64 + base_ms);
                let probed_ms = probed.iter().find(|(r, _)| *r == rtt).map_or(f64::NAN, |(_, ms)| *ms);
                let at_probed = pollers * 10.0 * 1000.0 / probed_ms;
                let rate = median(samples.iter().filter(|s| s.consumer == c).map(|s| s.rate()).collect());
                let mem = median(
                    samples
                        .iter()
                        .filter(|s| s.consumer == c)
                        .map(|s| s.memory.peak_kib as f64 / 1024.0)
                        .collect(),
                );
                println!(
                    "ceiling {pollers:.1} pollers x 10 / {rtt} ms = {ceiling:.0} msgs/s: {:<8} {rate:.0} msgs/s = {:.2} of it; \
                     of {with_base:.0} (RTT + the backend's {base_ms:.1} ms a call): {:.2}; of {at_probed:.0} (the probed \
                     {probed_ms:.2} ms a call): {:.2} (peak RSS median {mem:.1} MiB)",
                    c.label(),
                    rate / ceiling,
                    rate / with_base,
                    rate / at_probed
                );
                let of = |f: fn(&Sample) -> f64| {
                    median(samples.iter().filter(|s| s.consumer == c).map(|s| f(s)).collect())
                };
                println!(
                    "  CPU-s per 1,000 messages: {:<8} {:.3}, the bench (stand-in + proxy + sink) {:.3}; cores busy: \
                     {:.2} + {:.2} of {}",
                    c.label(),
                    of(|s| s.cpu_window * 1000.0 / s.messages as f64),
                    of(|s| s.harness_cpu_window * 1000.0 / s.messages as f64),
                    of(|s| s.cpu_window / s.seconds),
                    of(|s| s.harness_cpu_window / s.seconds),
                    std::thread::available_parallelism().map_or(0, |n| n.get())
                );
                breakdown_summary(&samples, c);
                if !by_receive.is_empty() {
                    let took = median(by_receive.iter().map(|(ms, _)| *ms).collect());
                    let ratios: Vec<f64> = by_receive.iter().map(|(_, r)| *r).collect();
                    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                    println!(
                        "  at the receive time it measured (median {took:.1} ms a call): each run's rate / \
                         (its pollers x 10 / its receive time): {:<8} [{}] (median {:.2})",
                        c.label(),
                        shown.join(", "),
                        median(ratios)
                    );
                }
            }
        }
    }
}

/// Every consumer in these samples: the readers in `--reader` order, the loop, then the peers.
fn consumers(samples: &[&Sample]) -> Vec<Consumer> {
    let readers = samples
        .iter()
        .filter_map(|s| match s.consumer {
            Consumer::Reader(i) => Some(i + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut all: Vec<Consumer> = (0..readers).map(Consumer::Reader).collect();
    all.push(Consumer::Baseline);
    for s in samples {
        if matches!(s.consumer, Consumer::Peer(_)) && !all.contains(&s.consumer) {
            all.push(s.consumer);
        }
    }
    all
}

/// Each reader against the loop, then each further reader against the first one, then every
/// consumer's memory medians.
fn summary_of(samples: &[&Sample]) {
    let all = consumers(samples);
    let readers: Vec<Consumer> = all.iter().copied().filter(|c| matches!(c, Consumer::Reader(_))).collect();
    for &r in &readers {
        versus(samples, r, Consumer::Baseline);
    }
    for &r in readers.iter().skip(1) {
        versus(samples, r, Consumer::Reader(0));
    }
    for &peer in all.iter().filter(|c| matches!(c, Consumer::Peer(_))) {
        versus(samples, Consumer::Reader(0), peer);
    }
    let mib = |f: fn(&Memory) -> Option<u64>, c: Consumer| {
        median(
            samples
                .iter()
                .filter(|s| s.consumer == c)
                .filter_map(|s| f(&s.memory))
                .map(|k| k as f64 / 1024.0)
                .collect(),
        )
    };
    for c in all {
        println!(
            "median memory      {:<9} idle {:.1} MiB, end {:.1} MiB, peak {:.1} MiB",
            c.label(),
            mib(|m| m.idle_kib, c),
            mib(|m| Some(m.end_kib), c),
            mib(|m| Some(m.peak_kib), c)
        );
    }
}

/// Medians of `a` and `b`, the ratio of medians, and the ratios within each round.
fn versus(samples: &[&Sample], a: Consumer, b: Consumer) {
    let pick = |c: Consumer, f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
        samples.iter().filter(|s| s.consumer == c).map(|s| f(s)).collect()
    };
    let rate = Sample::rate;
    let cpu = Sample::cpu_per_10k;
    let (a_rate, b_rate) = (median(pick(a, &rate)), median(pick(b, &rate)));
    let (a_cpu, b_cpu) = (median(pick(a, &cpu)), median(pick(b, &cpu)));
    let rounds = samples.iter().map(|s| s.round).max().map_or(0, |r| r + 1);
    let mut round_rate = Vec::new();
    let mut round_cpu = Vec::new();
    for round in 0..rounds {
        let find = |c| samples.iter().find(|s| s.round == round && s.consumer == c);
        if let (Some(x), Some(y)) = (find(a), find(b)) {
            round_rate.push(rate(x) / rate(y));
            round_cpu.push(cpu(x) / cpu(y));
        }
    }
    let against_loop = b == Consumer::Baseline;
    let (a, b) = (a.label(), b.label());
    println!("median throughput  {a} {a_rate:.0} msgs/s, {b} {b_rate:.0} msgs/s");
    println!("median CPU-s/10k   {a} {a_cpu:.2}, {b} {b_cpu:.2}");
    println!(
        "ratio of medians   throughput {a}/{b} {:.3}, CPU {a}/{b} {:.3}",
        a_rate / b_rate,
        a_cpu / b_cpu
    );
    println!(
        "per-round ratios   throughput {:?} (median {:.3}), CPU {:?} (median {:.3})",
        rounded(&round_rate),
        median(round_rate.clone()),
        rounded(&round_cpu),
        median(round_cpu.clone())
    );
    if against_loop {
        let target = a_rate / b_rate >= 0.95 && a_cpu < b_cpu;
        println!(
            "target (>= 0.95 of the loop's throughput at less CPU): {}",
            if target { "met" } else { "NOT met" }
        );
    }
}

fn rounded(values: &[f64]) -> Vec<f64> {
    values.iter().map(|v| (v * 1000.0).round() / 1000.0).collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}
