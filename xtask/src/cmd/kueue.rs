//! `cargo xtask kueue`: build (or find) Kueue, then the operator's Kueue test.
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::stack::kueue::{ensure_binary, Args};
use crate::util::{done, repo_root, step};

pub fn run(args: Args) -> Result<()> {
    let bin = ensure_binary()?;
    println!("{}", bin.display());
    if args.build_only {
        return Ok(());
    }
    let t =
        step("operator test with Kueue's manager (real_kueue_queues_evicts_and_preempts_dgljobs)");
    let status = Command::new("cargo")
        .current_dir(repo_root())
        .args(["test", "-p", "dgl-operator", "--test", "kueue"])
        .env("DGL_OPERATOR_KUEUE_BIN", &bin)
        .status()
        .context("running cargo test")?;
    ensure!(status.success(), "the Kueue tests failed ({status})");
    done(t);
    Ok(())
}
