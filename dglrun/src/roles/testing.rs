//! Options for the roles' settings tests, as command lines give them.

use std::path::Path;

use clap::Parser;
use dgl_api::names;

use crate::cli::{Cli, Options};

/// Options as the command line `dglrun <args>` gives them.
pub(crate) fn opts(args: &[&str]) -> Options {
    Cli::try_parse_from(["dglrun"].iter().chain(args))
        .unwrap()
        .opts
}

/// A folder with a token file and a hostfile of two workers.
pub(crate) fn launcher_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "secret\n").unwrap();
    std::fs::write(
        dir.path().join(names::HOSTFILE),
        "10.0.0.1 30049 j-worker-0 slots=3\n10.0.0.2 30049 j-worker-1 slots=3\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(names::PARTFILE),
        "10.0.0.9 30049 j-partitioner\n",
    )
    .unwrap();
    dir
}

pub(crate) fn launcher_opts(dir: &Path, extra: &[&str]) -> Options {
    let d = dir.display().to_string();
    let token = dir.join("token").display().to_string();
    let mut args = vec![
        "--config-dir",
        &d,
        "--token-file",
        &token,
        "--graph-name",
        "g",
        "--train-entry-point",
        "train.py",
        "--num-epochs",
        "2",
        "--batch-size",
        "100",
    ];
    args.extend(extra);
    opts(&args)
}
