//! `cargo xtask bench graphbolt`: GraphSAGE (examples/graphsage) on the
//! same graph, partitioned both ways in one run: DGL's `graph.dgl` and
//! GraphBolt's `fused_csc_sampling_graph.pt`. It runs dglrun's real-DGL
//! tests `graphsage_trains_on_two_machines` and
//! `graphsage_trains_with_graphbolt` (two network namespaces, one worker
//! each, partitioner + launcher; needs root) one after the other and reads
//! the figures they print: bytes each worker received, rank 0's seconds per
//! epoch and the whole run's wall time.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::util::repo_root;

#[derive(clap::Args, Clone)]
pub struct GraphboltArgs {
    /// Nodes of the example's synthetic graph (partition.py --num_nodes;
    /// about 10 edges per node).
    #[arg(long, default_value_t = 20_000)]
    nodes: u64,
}

/// The two tests, in the order they run, and their tags in FIGURES lines.
const RUNS: [(&str, &str, &str); 2] = [
    ("graphsage_trains_on_two_machines", "s", "graph.dgl"),
    ("graphsage_trains_with_graphbolt", "gb", "GraphBolt"),
];

pub fn run(args: GraphboltArgs) -> Result<()> {
    // The tests join network namespaces with `ip netns`.
    crate::ensure::apt(&["iproute2"])?;
    let python = crate::pyenv::ensure_venv(&repo_root())?;
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "test", "-p", "dglrun", "--test", "real_dgl", "--", "--exact",
    ])
    .args(RUNS.map(|r| r.0))
    .args(["--nocapture", "--test-threads", "1"])
    .env("DGLRUN_TEST_PYTHON", &python)
    .env("DGLRUN_TEST_NUM_NODES", args.nodes.to_string())
    .current_dir(repo_root())
    .stdout(Stdio::inherit())
    .stderr(Stdio::piped());
    eprintln!("==> {cmd:?}");
    let out = cmd.output().context("cannot run cargo test")?;
    let text = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("{text}");
        bail!("the real-DGL runs failed ({})", out.status);
    }
    let figures = parse(&text);
    println!(
        "\nGraphSAGE, {} nodes, 2 workers (one per network namespace), 3 epochs\n",
        args.nodes
    );
    println!("| partitions | bytes received, worker 0 | worker 1 | seconds per epoch (rank 0) | run, s |");
    println!("|---|---|---|---|---|");
    for (_, tag, name) in RUNS {
        let f = figures
            .get(tag)
            .with_context(|| format!("no FIGURES line for {name} (tag={tag})"))?;
        let get = |k: &str| f.get(k).map_or("?", String::as_str);
        println!(
            "| {name} | {} | {} | {} | {} |",
            get("shipped_w0"),
            get("shipped_w1"),
            get("epoch_seconds").replace(',', ", "),
            get("run_seconds")
        );
    }
    Ok(())
}

/// `FIGURES tag=T k=v ...` lines: tag → {k: v}.
fn parse(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("FIGURES ") else {
            continue;
        };
        let kv: BTreeMap<String, String> = rest
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(tag) = kv.get("tag") {
            out.insert(tag.clone(), kv);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_lines_are_read_by_tag() {
        let f = parse("noise\nFIGURES tag=gb shipped_w0=10 shipped_w1=12 epoch_seconds=1.0,0.9 run_seconds=30.0\n");
        assert_eq!(f["gb"]["shipped_w1"], "12");
        assert_eq!(f["gb"]["epoch_seconds"], "1.0,0.9");
        assert!(!f.contains_key("s"));
    }
}
