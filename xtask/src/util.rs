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

/// The workspace's root. Read at run time (`cargo xtask`, `cargo run` and
/// `cargo test` set `CARGO_MANIFEST_DIR` to xtask's folder): a path compiled
/// in would name whichever checkout built the cached xtask
/// (`checkout-mtimes`). Run directly, the binary looks up from the working
/// directory for the workspace. Read once: [`forget_manifest_dir`] removes
/// the variable.
pub fn repo_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
            if let Some(root) = Path::new(&dir).parent() {
                return root.to_path_buf();
            }
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        cwd.ancestors()
            .find(|d| d.join("xtask/Cargo.toml").is_file() && d.join("Cargo.toml").is_file())
            .unwrap_or(&cwd)
            .to_path_buf()
    })
    .clone()
}

/// Notes the workspace's root, then removes `CARGO_MANIFEST_DIR` from this
/// process's environment, so that no cargo it starts inherits it: build
/// scripts that read it (ring's) make cargo track it, and its value, the
/// checkout's path, would rebuild them and every crate above them in each
/// new clone. Called first in `main`, before any thread starts.
pub fn forget_manifest_dir() {
    repo_root();
    std::env::remove_var("CARGO_MANIFEST_DIR");
}

/// Every step this process began: its name, start, and time once done
/// (for [`step_summary`]).
static STEPS: std::sync::Mutex<Vec<(String, Instant, Option<std::time::Duration>)>> =
    std::sync::Mutex::new(Vec::new());

pub fn step(name: &str) -> Instant {
    println!("\n==> {name}");
    let now = Instant::now();
    if let Ok(mut steps) = STEPS.lock() {
        steps.push((name.to_owned(), now, None));
    }
    now
}

pub fn done(started: Instant) {
    let took = started.elapsed();
    println!("    ({:.1}s)", took.as_secs_f64());
    if let Ok(mut steps) = STEPS.lock() {
        if let Some(s) = steps.iter_mut().rev().find(|s| s.1 == started) {
            s.2 = Some(took);
        }
    }
}

/// The finished steps, one line each (time, then name, shortened), in the
/// order they began: where a run's time went.
pub fn step_summary() -> String {
    let steps = STEPS.lock().map(|s| s.clone()).unwrap_or_default();
    steps
        .iter()
        .filter_map(|(name, _, took)| {
            let took = (*took)?;
            let short: String = name.chars().take(90).collect();
            Some(format!("  {:>7.1}s  {short}\n", took.as_secs_f64()))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_step_is_in_the_summary_and_an_unfinished_one_is_not() {
        let t = step("summary-test finished step");
        let _open = step("summary-test open step");
        done(t);
        let s = step_summary();
        assert!(s.contains("s  summary-test finished step\n"), "{s}");
        assert!(!s.contains("summary-test open step"), "{s}");
    }
}
