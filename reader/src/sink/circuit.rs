//! Every sink's circuit breaker (`breaker`), shared by the stages that feed it and the ones that
//! obey it.
//!
//! Who feeds it: the dispatcher (each record's outcome per sink: delivered or rejected closes it,
//! failed for the sink's fault counts towards opening it) and the exactly-once worker (a
//! pre-commit or commit that failed or succeeded). Who obeys it: the pollers (no receiving while a
//! sink the source's messages go to is open: `blocks_receiving`), the held deliveries (wait for
//! their turn: `wait_turn`), `/readyz` and the sink health report (open counts as stalled, so the
//! operator's `SinksHealthy` turns False within seconds, not after `--unready-after-seconds`).
//!
//! Why one value per reader ([`Circuits`], in `Sinks`): a reader runs one source, sink names are
//! unique in it, and the readiness watch, the health report and the pollers all ask about the same
//! sinks; two readers in one process (the tests) must not share them.
//!
//! Each change of state is one event (`events::CircuitChanged`: its line and its metrics).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::breaker::{Breaker, State, Transition};
use super::events::CircuitChanged;
use crate::process::events::Event;
use crate::process::metrics::Metrics;

/// Every sink's breaker, by name.
pub struct Circuits {
    breakers: Mutex<BTreeMap<String, Breaker>>,
    /// Bumped on every change of state, so that held deliveries waiting for a sink wake up.
    changed: watch::Sender<u64>,
}

impl Default for Circuits {
    fn default() -> Self {
        Self { breakers: Mutex::default(), changed: watch::Sender::new(0) }
    }
}

/// What a held delivery may do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// Deliver: every sink it goes to is closed.
    Deliver,
    /// Deliver as the probe of these open sinks (then call [`Circuits::probe_done`]).
    Probe(Vec<String>),
    /// The reader is stopping.
    Stopped,
}

impl Circuits {
    fn breakers(&self) -> MutexGuard<'_, BTreeMap<String, Breaker>> {
        self.breakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `sink` took a delivery (or answered that a record is bad, which says it is up). On the hot
    /// path (once per delivered record): a sink never seen failing has no breaker to update.
    pub fn succeeded(&self, sink: &str, metrics: &Metrics) {
        let change = self.breakers().get_mut(sink).and_then(Breaker::succeeded);
        if let Some(change) = change {
            self.emit(sink, &change, None, metrics);
        }
    }

    /// A delivery to `sink` failed for the sink's fault.
    pub fn failed(&self, sink: &str, reason: &str, metrics: &Metrics) {
        let change =
            self.breakers().entry(sink.to_owned()).or_default().failed(Instant::now(), fastrand::f64());
        if let Some(change) = change {
            self.emit(sink, &change, Some(reason), metrics);
        }
    }

    /// `sink`'s state now (closed if it was never used).
    pub fn state(&self, sink: &str) -> State {
        self.breakers().get(sink).map_or(State::Closed, Breaker::state)
    }

    /// Any of `sinks` open or half-open: receiving for them would only fill the reader with messages
    /// it can only hold.
    pub fn blocks_receiving<'a>(&self, sinks: impl IntoIterator<Item = &'a str>) -> bool {
        let breakers = self.breakers();
        sinks.into_iter().any(|s| breakers.get(s).is_some_and(|b| b.state() != State::Closed))
    }

    /// Any sink open or half-open (for readiness).
    pub fn any_open(&self) -> bool {
        self.breakers().values().any(|b| b.state() != State::Closed)
    }

    /// Wait until a held delivery to `sinks` may go: after `delay` when they are all closed (the
    /// backoff between its rounds), at once when one closes, or when it takes a due probe of an open
    /// one. Every held delivery waits here, so while a sink is open only its probe reaches it.
    pub async fn wait_turn(
        &self,
        sinks: &[String],
        delay: Duration,
        stop: &CancellationToken,
        metrics: &Metrics,
    ) -> Turn {
        if stop.is_cancelled() {
            return Turn::Stopped;
        }
        // A first delivery to closed sinks (the usual case) goes at once, without a timer.
        if delay.is_zero()
            && let (Some(turn), _) = self.try_turn(sinks, metrics)
        {
            return turn;
        }
        let mut changes = self.changed.subscribe();
        let slept = tokio::select! {
            biased;
            () = stop.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
            () = self.wait_for_close(sinks, &mut changes) => true,
        };
        if !slept {
            return Turn::Stopped;
        }
        loop {
            changes.mark_unchanged();
            let (turn, next_probe) = self.try_turn(sinks, metrics);
            if let Some(turn) = turn {
                return turn;
            }
            let wake =
                next_probe.map_or(Duration::from_secs(1), |at| at.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = tokio::time::sleep(wake) => {}
                _ = changes.changed() => {}
                () = stop.cancelled() => return Turn::Stopped,
            }
        }
    }

    /// Resolves when one of `sinks` that was open closes (the held deliveries go at once).
    async fn wait_for_close(&self, sinks: &[String], changes: &mut watch::Receiver<u64>) {
        let open = |sinks: &[String]| self.blocks_receiving(sinks.iter().map(String::as_str));
        if !open(sinks) {
            return std::future::pending().await;
        }
        while changes.changed().await.is_ok() {
            if !open(sinks) {
                return;
            }
        }
        std::future::pending().await
    }

    /// Deliver if all closed; probe if a probe of an open one is due; else when to look again.
    fn try_turn(&self, sinks: &[String], metrics: &Metrics) -> (Option<Turn>, Option<Instant>) {
        let now = Instant::now();
        let mut breakers = self.breakers();
        let mut taken = Vec::new();
        let mut changes = Vec::new();
        let mut next_probe: Option<Instant> = None;
        let mut blocked = false;
        for sink in sinks {
            let Some(breaker) = breakers.get_mut(sink) else { continue };
            if breaker.state() == State::Closed {
                continue;
            }
            match breaker.take_probe(now) {
                Some(change) => {
                    taken.push(sink.clone());
                    changes.push((sink.clone(), change));
                }
                None => {
                    blocked = true;
                    next_probe = match (next_probe, breaker.next_probe()) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
        drop(breakers);
        for (sink, change) in &changes {
            self.emit(sink, change, None, metrics);
        }
        match (taken.is_empty(), blocked) {
            (true, false) => (Some(Turn::Deliver), None),
            (false, _) => (Some(Turn::Probe(taken)), None),
            (true, true) => (None, next_probe),
        }
    }

    /// The probe's delivery is over: a breaker still half-open got no answer from it (the record
    /// never reached that sink), so the next held delivery probes at once.
    pub fn probe_done(&self, sinks: &[String]) {
        let now = Instant::now();
        let mut breakers = self.breakers();
        for sink in sinks {
            if let Some(breaker) = breakers.get_mut(sink) {
                breaker.probe_abandoned(now);
            }
        }
        drop(breakers);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Each sink's state, for the health report.
    pub fn states(&self) -> BTreeMap<String, State> {
        self.breakers().iter().map(|(name, b)| (name.clone(), b.state())).collect()
    }

    /// One change of state: its event (the line, the metrics), and a wake-up for the held
    /// deliveries.
    fn emit(&self, sink: &str, change: &Transition, reason: Option<&str>, metrics: &Metrics) {
        CircuitChanged { sink, change, reason }.emit(metrics);
        self.changed.send_modify(|n| *n += 1);
    }
}
