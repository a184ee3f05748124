//! Measuring helpers the benchmarks share: a process's CPU seconds and
//! memory from /proc, the load average, percentiles and medians.

use anyhow::{anyhow, Context, Result};

/// CPU seconds (user + system) and memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ProcSample {
    pub(super) cpu_seconds: f64,
    pub(super) rss_kib: u64,
    pub(super) hwm_kib: u64,
}

pub(super) fn proc_sample(pid: u32) -> Result<ProcSample> {
    let cpu_seconds = proc_cpu(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ProcSample {
        cpu_seconds,
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    })
}

/// CPU seconds (user + system) a process has used, threads included.
pub(crate) fn proc_cpu(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    // After "(comm)": field 3 (state) is index 0, utime (14) and stime (15)
    // are indexes 11 and 12.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow!("short /proc/{pid}/stat"))?
            .parse::<u64>()? as f64)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(11)? + ticks(12)?) / hz)
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Exact percentile (nearest rank) of a sample.
pub(super) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn this_process_is_sampled() {
        let s = proc_sample(std::process::id()).unwrap();
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib, "{s:?}");
        assert!(proc_cpu(u32::MAX).is_err(), "no such process");
    }
}
