//! `cargo xtask fuzz`: the long run of the hostile-input proptests
//! (`partition/tests/hostile_input.rs`, issue #25 item 6). `cargo test`
//! runs them with 64 inputs per reader; this runs `--cases` per reader,
//! optimised, one test at a time (so each reader's largest allocation is
//! its own), and prints per reader: inputs tried, panics, the largest
//! single allocation, and how many inputs were read without an error.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};

#[derive(clap::Args)]
pub struct Args {
    /// Inputs per reader (metadata.json, npy, parquet, csv, text format).
    #[arg(long, default_value_t = 100_000)]
    cases: u64,
    /// Build and run the tests unoptimised (about 10 times slower); the
    /// optimised build keeps integer overflow checks on in every crate.
    #[arg(long)]
    debug: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "fuzz: {} inputs per reader, {} build, {cpus} CPUs, load average {}",
        args.cases,
        if args.debug { "debug" } else { "release" },
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["test", "-p", "dgl-partition", "--test", "hostile_input"]);
    if !args.debug {
        // An overflow in any crate must panic (and be counted), not wrap;
        // built apart so that the usual release artifacts stay as they are.
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::util::repo_root().join("target"));
        cmd.arg("--release")
            .env("CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS", "true")
            .env("CARGO_TARGET_DIR", target.join("fuzz"));
    }
    cmd.args(["fuzz_", "--", "--nocapture", "--test-threads=1"])
        .env("PROPTEST_CASES", args.cases.to_string())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting cargo test")?;
    let stderr = child.stderr.take().context("cargo test's stderr")?;
    let mut rows = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.context("reading cargo test's output")?;
        if let Some(row) = line.split_once("fuzz ").map(|(_, r)| r.to_string()) {
            println!("  {row}");
            rows.push(row);
        } else if line.contains("panicked") || line.contains("minimal failing input") {
            eprintln!("{line}");
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    println!(
        "fuzz: {} readers in {:.0} s",
        rows.len(),
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("the hostile-input proptests failed ({status}); see the input above");
    }
    if rows.len() != 5 {
        bail!("expected 5 readers' figures, got {}", rows.len());
    }
    Ok(())
}
