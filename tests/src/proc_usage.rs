//! A process's CPU time and memory from `/proc`, for benchmarks that report what the operator
//! costs at rest.
//!
//! Why `/proc` and not the process's own metrics: the figure must include everything the process
//! does (its runtime, TLS, allocations), whatever it chooses to instrument.

use std::collections::BTreeMap;

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

/// CPU seconds so far of every process on the machine, summed by command name (`/proc/*/stat`):
/// two readings' difference says who used the machine between them (a process that started in
/// between counts from zero; one that ended is missing from the second and not counted).
pub fn cpu_by_command() -> BTreeMap<String, f64> {
    let mut by_command = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return by_command };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some((command, seconds)) = command_cpu(&stat) {
            *by_command.entry(command).or_default() += seconds;
        }
    }
    by_command
}

/// The command name and CPU seconds of one `/proc/<pid>/stat` line.
fn command_cpu(stat: &str) -> Option<(String, f64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((stat[open + 1..close].to_owned(), ticks / USER_HZ))
}

/// What each command used between two [`cpu_by_command`] readings, seconds, highest first.
pub fn cpu_between(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    let mut used: Vec<(String, f64)> = after
        .iter()
        .map(|(command, &s)| (command.clone(), s - before.get(command).copied().unwrap_or(0.0)))
        .filter(|(_, s)| *s > 0.0)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    used
}

/// The machine's busy CPU seconds so far, all cores (`/proc/stat`: everything but idle and iowait).
pub fn machine_busy_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<f64> =
        text.lines().next()?.split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    let (idle, iowait) = (*ticks.get(3)?, *ticks.get(4)?);
    Some((ticks.iter().take(8).sum::<f64>() - idle - iowait) / USER_HZ)
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
    fn sums_cpu_by_command_and_orders_what_was_used() {
        let stat = "7 (kube-apiserver) S 1 7 7 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(command_cpu(stat), Some(("kube-apiserver".to_owned(), 3.0)));
        let before = BTreeMap::from([("etcd".to_owned(), 1.0), ("kube-apiserver".to_owned(), 3.0)]);
        let after = BTreeMap::from([
            ("etcd".to_owned(), 2.0),
            ("kube-apiserver".to_owned(), 9.0),
            ("sluice-reader".to_owned(), 0.5),
        ]);
        let used = cpu_between(&before, &after);
        let names: Vec<&str> = used.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["kube-apiserver", "etcd", "sluice-reader"]);
        assert_eq!(used[0].1, 6.0);
    }

    #[test]
    fn the_machine_and_this_process_can_be_read() {
        assert!(machine_busy_seconds().is_some_and(|s| s > 0.0));
        assert!(cpu_by_command().values().sum::<f64>() > 0.0);
    }

    #[test]
    fn this_process_can_be_read() {
        let usage = Usage::read(std::process::id()).expect("readable");
        assert!(usage.rss_bytes > 0 && usage.peak_rss_bytes >= usage.rss_bytes);
    }
}
