//! Helpers every task shares: the workspace root, running a command in
//! it, the step lines of the output, and the node cluster by name. This
//! module imports none of the task modules.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use localkube::{ClusterConfig, LocalCluster};

/// The workspace is linted, built and tested with dgl-partition's MPI
/// transport (dglrun never links it: it does not depend on dgl-partition).
pub const WORKSPACE_FEATURES: &str = "dgl-partition/mpi";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn step(name: &str) -> Instant {
    println!("\n==> {name}");
    Instant::now()
}

pub fn done(started: Instant) {
    println!("    ({:.1}s)", started.elapsed().as_secs_f64());
}

/// Runs a command in the repo root, inheriting output; fails naming it.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .current_dir(repo_root())
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// The cluster with the default node of its name (see `localkube::NodeConfig`).
pub fn node_cluster(name: &str) -> anyhow::Result<LocalCluster> {
    node_cluster_n(name, 1)
}

/// The cluster with `nodes` nodes (see `localkube::ClusterConfig::with_nodes`).
pub fn node_cluster_n(name: &str, nodes: usize) -> anyhow::Result<LocalCluster> {
    Ok(LocalCluster::new(
        ClusterConfig::new(name)?.with_nodes(nodes),
    )?)
}
