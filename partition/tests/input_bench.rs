//! Read throughput of the chunked reader (not run by default):
//! `cargo test --release -p dgl-partition --test input_bench -- --ignored --nocapture`.
//! INPUT_BENCH_EDGES (default 10 M), INPUT_BENCH_CHUNKS (default 8) and
//! INPUT_BENCH_THREADS (default 2) change the run. Files are read right
//! after they are written, so from the page cache.

use std::time::Instant;

use dgl_partition::input::{read, write_chunked, EdgeFormat, Source};
use dgl_partition::model::{EdgeType, InputGraph, NodeType};

/// CPU seconds (user + system) this process has used, from /proc; the
/// machine is shared, so CPU time says more than wall time.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime) in 100 Hz ticks.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

fn env(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "a measurement: run it with --release --ignored --nocapture"]
fn read_throughput_per_edge_format() {
    let (m, chunks, threads) = (
        env("INPUT_BENCH_EDGES", 10_000_000),
        env("INPUT_BENCH_CHUNKS", 8),
        env("INPUT_BENCH_THREADS", 2),
    );
    let n = (m / 10).max(1);
    let mut x = 88172645463325252u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (src, dst): (Vec<u64>, Vec<u64>) = (0..m).map(|_| (next(), next())).unzip();
    let g = InputGraph {
        name: "bench".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: n,
            ..Default::default()
        }],
        etypes: vec![EdgeType {
            src_type: 0,
            rel: "_E".into(),
            dst_type: 0,
            src,
            dst,
            ..Default::default()
        }],
    };
    for f in [EdgeFormat::Csv, EdgeFormat::Npy, EdgeFormat::Parquet] {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let meta = write_chunked(&g, dir.path(), chunks as usize, f).unwrap();
        let wrote = t.elapsed().as_secs_f64();
        let bytes: u64 = std::fs::read_dir(dir.path().join("edge_index"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let back = read(&Source::Chunked { metadata: meta }, threads as usize).unwrap();
        let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        assert_eq!(back.etypes[0].src, g.etypes[0].src);
        assert_eq!(back.etypes[0].dst, g.etypes[0].dst);
        println!(
            "{f:?}: {m} edges in {chunks} chunks, {:.1} MB; read {secs:.3} s = {:.0} MB/s, \
             {:.1} M edges/s ({threads} threads); {cpu:.2} CPU s = {:.0} MB per CPU s; write {wrote:.2} s",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / secs,
            m as f64 / 1e6 / secs,
            bytes as f64 / 1e6 / cpu.max(0.01)
        );
    }
}
