//! A process's CPU time and memory from `/proc`, for benchmarks that report what the operator
//! costs at rest.
//!
//! Why `/proc` and not the process's own metrics: the figure must include everything the process
//! does (its runtime, TLS, allocations), whatever it chooses to instrument.

use anyhow::{Context as _, Result};

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`: 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// One reading of a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// User plus system CPU time so far, seconds.
    pub cpu_seconds: f64,
    /// Resident memory now, bytes.
    pub rss_bytes: u64,
    /// The highest resident memory so far (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
}

impl Usage {
    /// Reads process `pid`.
    pub fn read(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/PID/stat")?;
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
        Self::parse(&stat, &status).context("parsing /proc/PID/stat and status")
    }

    /// From the texts of `/proc/<pid>/stat` and `/proc/<pid>/status`.
    pub fn parse(stat: &str, status: &str) -> Option<Self> {
        // The command name (field 2) may hold spaces: fields are counted after its closing ')'.
        let after = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        let kib = |key: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(key))?;
            line[key.len()..].split_whitespace().next()?.parse().ok()
        };
        Some(Self {
            cpu_seconds: ticks / USER_HZ,
            rss_bytes: kib("VmRSS:")? * 1024,
            peak_rss_bytes: kib("VmHWM:")? * 1024,
        })
    }
}

/// The machine's 1-minute load average (`/proc/loadavg`), to say how busy the machine was.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_time_and_memory() {
        let stat = "4242 (sluice op) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        let status = "Name:\tsluice-operator\nVmHWM:\t   65536 kB\nVmRSS:\t   40960 kB\n";
        let usage = Usage::parse(stat, status).expect("parsed");
        assert_eq!(usage, Usage { cpu_seconds: 3.0, rss_bytes: 40 << 20, peak_rss_bytes: 64 << 20 });
    }

    #[test]
    fn this_process_can_be_read() {
        let usage = Usage::read(std::process::id()).expect("readable");
        assert!(usage.rss_bytes > 0 && usage.peak_rss_bytes >= usage.rss_bytes);
    }
}
