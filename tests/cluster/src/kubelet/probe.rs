//! Readiness and liveness probes, as a kubelet runs them: an HTTP GET (2xx or 3xx passes) or a TCP
//! connect on the container's port, each bounded by its timeout; thresholds count consecutive
//! results. The probe goes to the loopback port the container port was given (see
//! [`super::template`]).

use std::time::{Duration, Instant};

use super::template::ProbeSpec;

/// One probe's running tally.
#[derive(Debug, Clone)]
pub struct Prober {
    pub spec: ProbeSpec,
    /// The loopback port probed.
    pub host_port: u16,
    next: Instant,
    successes: u32,
    failures: u32,
}

/// What the tally says after a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `successThreshold` consecutive passes.
    Passing,
    /// `failureThreshold` consecutive failures.
    Failing,
    /// Neither yet.
    Undecided,
}

impl Prober {
    /// A prober for a container started at `started`: the first probe after `initialDelaySeconds`.
    pub fn new(spec: ProbeSpec, host_port: u16, started: Instant) -> Self {
        let next = started + Duration::from_secs(spec.initial_delay_seconds);
        Self { spec, host_port, next, successes: 0, failures: 0 }
    }

    /// Whether a probe is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Records one result and schedules the next probe.
    pub fn record(&mut self, passed: bool, now: Instant) -> Verdict {
        self.next = now + Duration::from_secs(self.spec.period_seconds);
        if passed {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        if self.successes >= self.spec.success_threshold {
            Verdict::Passing
        } else if self.failures >= self.spec.failure_threshold {
            Verdict::Failing
        } else {
            Verdict::Undecided
        }
    }
}

/// Runs one probe against `127.0.0.1:port`.
pub async fn run(http: &reqwest::Client, spec: &ProbeSpec, port: u16) -> bool {
    let timeout = Duration::from_secs(spec.timeout_seconds);
    match &spec.path {
        Some(path) => {
            let url = format!("http://127.0.0.1:{port}{path}");
            match http.get(url).timeout(timeout).send().await {
                Ok(response) => response.status().is_success() || response.status().is_redirection(),
                Err(_) => false,
            }
        }
        None => matches!(
            tokio::time::timeout(timeout, tokio::net::TcpStream::connect(("127.0.0.1", port))).await,
            Ok(Ok(_))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ProbeSpec {
        ProbeSpec {
            path: Some("/readyz".into()),
            port: 8080,
            initial_delay_seconds: 2,
            period_seconds: 5,
            timeout_seconds: 1,
            failure_threshold: 3,
            success_threshold: 1,
        }
    }

    #[test]
    fn thresholds_count_consecutive_results() {
        let t0 = Instant::now();
        let mut p = Prober::new(spec(), 1, t0);
        assert!(!p.due(t0) && p.due(t0 + Duration::from_secs(2)));
        assert_eq!(p.record(true, t0), Verdict::Passing);
        assert!(!p.due(t0 + Duration::from_secs(4)));
        assert_eq!(p.record(false, t0), Verdict::Undecided);
        assert_eq!(p.record(false, t0), Verdict::Undecided);
        assert_eq!(p.record(true, t0), Verdict::Passing, "a pass resets the failures");
        for _ in 0..2 {
            p.record(false, t0);
        }
        assert_eq!(p.record(false, t0), Verdict::Failing);
    }
}
