//! CPU time of a process, from the kernel's own accounting.
//!
//! Why /proc/<pid>/stat: both consumers run as separate processes and are measured the same way,
//! while still running (the driver reads the figure at the moment the queue is empty, before it
//! stops them). The process-wide line sums every thread, so a multi-threaded runtime is counted
//! whole. Times are in clock ticks (`getconf CLK_TCK`, 100 on Linux).

use std::time::Duration;

/// User + system CPU time the process has used so far.
pub fn cpu_time(pid: u32, ticks_per_second: u64) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = utime_plus_stime(&stat)
        .ok_or_else(|| std::io::Error::other(format!("unexpected /proc/{pid}/stat: {stat:?}")))?;
    Ok(Duration::from_secs_f64(ticks as f64 / ticks_per_second as f64))
}

/// Clock ticks per second as the system reports them.
pub fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Fields 14 and 15 (utime, stime) of a stat line. The command name (field 2) may hold spaces and
/// parentheses, so counting starts after its last `)`.
fn utime_plus_stime(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // after_name starts at field 3 (state): utime is field 14, index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory now and its peak (VmRSS, VmHWM), in KiB, from /proc/<pid>/status.
pub fn memory_kib(pid: u32) -> std::io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_utime_and_stime_past_an_awkward_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 37 0 0 20 0 5 0 100 0 0";
        assert_eq!(super::utime_plus_stime(line), Some(287));
    }
}
