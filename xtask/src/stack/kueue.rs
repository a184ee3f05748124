//! `cargo xtask kueue`: Kueue v0.17 from the Go module proxy, built like
//! Kubernetes (`go build` of `cmd/kueue` in a wrapper module, the binary
//! cached under `<cache>/bin/kueue-<version>/kueue`), then the operator's
//! test with Kueue's real manager (`operator/tests/kueue.rs`,
//! `real_kueue_queues_evicts_and_preempts_dgljobs`) run with it: on the
//! test control plane, the manager as a process on the host, DGLJob as an
//! external framework, waitForPodsReady on.
//!
//! Not yet on the node cluster: no e2e scenario runs Kueue beside the
//! Helm-installed operator (docs/benchmarks.md, "Kueue").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

use crate::test::{done, repo_root, step};

/// The Kueue release used.
pub(crate) const VERSION: &str = "v0.17.0";
const MODULE: &str = "sigs.k8s.io/kueue";

#[derive(clap::Args)]
pub struct Args {
    /// Only build (or find) the Kueue binary and print its path; do not run the test.
    #[arg(long)]
    pub build_only: bool,
}

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

/// `go` with the build pinned as localkube pins Kubernetes' (local
/// toolchain, static binary, no workspace, no VCS stamping).
fn go(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .env("GOWORK", "off")
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .stdin(Stdio::null());
    cmd
}

fn run_go(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: running go"))?;
    ensure!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The Kueue manager binary, built on first use and cached.
pub(crate) fn ensure_binary() -> Result<PathBuf> {
    let cache = localkube::cache_dir()?;
    let dir = cache.join("bin").join(format!("kueue-{VERSION}"));
    let bin = dir.join("kueue");
    if bin.is_file() {
        return Ok(bin);
    }
    let t = step(&format!("Kueue {VERSION}: go build of cmd/kueue from the Go module proxy (once, cached; about 20 min on 2 busy cores)"));
    let work = cache.join("gobuild").join(format!("kueue-{VERSION}"));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    std::fs::write(work.join("go.mod"), "module kueuebuild\n\ngo 1.25\n")
        .with_context(|| format!("writing {}/go.mod", work.display()))?;
    run_go(
        go(&work).args(["get", &format!("{MODULE}@{VERSION}")]),
        "go get Kueue",
    )?;
    // Built beside its final place, moved in once complete.
    let tmp = dir.with_file_name(format!("kueue-{VERSION}.partial"));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let target = format!("{MODULE}/cmd/kueue");
    run_go(
        go(&work)
            .args(["build", "-o"])
            .arg(tmp.join("kueue"))
            .arg(target),
        "go build of Kueue",
    )?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&tmp, &dir).with_context(|| format!("moving {} into place", dir.display()))?;
    done(t);
    Ok(bin)
}
