//! The machine the bench ran on and the markdown table.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::bench::measure::{loadavg, median};

use super::common::*;
use super::dataset::Rng;
use super::plain::{thread_cpu, Plain};

/// sha256 throughput of one core in MB per CPU second (best of three over
/// 256 MiB). CPU time rather than wall time, so that other load on the
/// machine does not lower it.
pub(super) fn sha256_throughput() -> f64 {
    let mut buf = vec![0u8; 256 << 20];
    Rng(42).fill(&mut buf);
    (0..3)
        .map(|_| {
            let cpu = thread_cpu();
            std::hint::black_box(Sha256::digest(&buf));
            buf.len() as f64 / MB / (thread_cpu() - cpu).max(1e-3)
        })
        .fold(0.0, f64::max)
}

pub(super) struct Machine {
    pub(super) cpus: usize,
    pub(super) cpu_model: String,
    pub(super) mem_gib: f64,
    pub(super) kernel: String,
    pub(super) load_before: String,
    /// File system type and device of the work folder.
    pub(super) fs: String,
}

impl Machine {
    pub(super) fn read(work: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        // The mount with the longest prefix of the work folder.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let fs = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && work.starts_with(f[1])).then(|| (f[1].len(), f[2], f[0]))
            })
            .max_by_key(|m| m.0)
            .map(|(_, ty, dev)| format!("{ty} ({dev})"))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            mem_gib: mem_kib / (1024.0 * 1024.0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            load_before: loadavg(),
            fs,
        }
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB memory, Linux {}, load average {}, work folder on {}",
            self.cpus, self.cpu_model, self.mem_gib, self.kernel, self.load_before, self.fs
        )
    }
}

pub(super) fn report(m: &Machine, load_after: &str, sha_mbps: [f64; 2], rows: &[Row]) -> String {
    let mut s = String::new();
    let args: Vec<String> = std::env::args().skip(1).collect();
    s.push_str(&format!("Command: `cargo xtask {}`\n\n", args.join(" ")));
    s.push_str(&format!(
        "Machine: {} CPUs ({}), {:.1} GiB memory, Linux {}; load average {} before, {} after; \
         files on {}. sha256 (sha2 crate, one core): {:.0} MB per CPU second before, {:.0} after.\n\n",
        m.cpus,
        m.cpu_model,
        m.mem_gib,
        m.kernel,
        m.load_before,
        load_after,
        m.fs,
        sha_mbps[0],
        sha_mbps[1]
    ));
    s.push_str(
        "| partitioner link | workers | total MiB | dglrun MB/s | plain TCP MB/s | ratio | run 1 ratio (first serving) | plain + fsync MB/s | plain + fsync + sha256 MB/s | dglrun CPU s (partitioner + workers) | plain TCP CPU s (senders + receivers) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let mbps = |runs: &[Run]| median(runs.iter().map(|x| x.mbps(r.total_bytes)).collect());
        let cpu = |runs: &[Run]| {
            format!(
                "{:.2} + {:.2}",
                median(runs.iter().map(|x| x.sender_cpu).collect()),
                median(runs.iter().map(|x| x.receiver_cpu).collect())
            )
        };
        let d = mbps(&r.dglrun);
        let p: Vec<f64> = r.plain.iter().map(|runs| mbps(runs)).collect();
        // Run 1 alone: the partitioner hashes every chunk as it first
        // serves it, as in a job's one transfer after partitioning.
        let first = r.dglrun[0].mbps(r.total_bytes) / r.plain[0][0].mbps(r.total_bytes);
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} |\n",
            r.link.label(),
            r.workers,
            r.total_bytes / MIB,
            d,
            p[0],
            d / p[0],
            first,
            p[1],
            p[2],
            cpu(&r.dglrun),
            cpu(&r.plain[0]),
        ));
    }
    s.push_str("\nEvery run, seconds:\n");
    for r in rows {
        let list = |runs: &[Run]| {
            runs.iter()
                .map(|x| format!("{:.2}", x.secs))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.push_str(&format!(
            "- {} link, workers {}: dglrun {}",
            r.link.label(),
            r.workers,
            list(&r.dglrun)
        ));
        for (mode, runs) in Plain::ALL.iter().zip(&r.plain) {
            s.push_str(&format!("; {} {}", mode.label(), list(runs)));
        }
        s.push_str(&format!(
            "; the partitioner answered {:.2}s after its start (layout check and file sizes, no hashing), \
             and the first byte of its largest file came {:.3}s after that (connect, manifest, `Fetch`, first chunk hashed)\n",
            r.manifest_secs, r.first_byte_secs
        ));
    }
    s
}

/// The run's figures as one JSON object (a line of `--json`, the chart's
/// source): per link and worker count the medians the table shows.
pub(super) fn json(m: &Machine, load_after: &str, rows: &[Row]) -> serde_json::Value {
    let total = rows.first().map_or(0, |r| r.total_bytes);
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let mbps = |runs: &[Run]| median(runs.iter().map(|x| x.mbps(r.total_bytes)).collect());
            let plain: serde_json::Map<String, serde_json::Value> = Plain::ALL
                .iter()
                .zip(&r.plain)
                .map(|(mode, runs)| (mode.label().to_string(), mbps(runs).into()))
                .collect();
            serde_json::json!({
                "workers": r.workers,
                "link": r.link.label(),
                "total_bytes": r.total_bytes,
                "runs": r.dglrun.len(),
                "dglrun_mbps": mbps(&r.dglrun),
                "plain_mbps": mbps(&r.plain[0]),
                "plain_modes_mbps": plain,
                "dglrun_secs": r.dglrun.iter().map(|x| x.secs).collect::<Vec<_>>(),
                "plain_secs": r.plain[0].iter().map(|x| x.secs).collect::<Vec<_>>(),
                "manifest_s": r.manifest_secs,
                "first_byte_s": r.first_byte_secs,
            })
        })
        .collect();
    serde_json::json!({
        "total_mib": total / MIB,
        "cpus": m.cpus,
        "cpu_model": m.cpu_model,
        "mem_gib": m.mem_gib,
        "fs": m.fs,
        "load_before": m.load_before,
        "load_after": load_after,
        "rows": rows,
    })
}
