//! What the commands need, built or fetched when it is missing and cached:
//! each step is a check taking seconds when warm. A command calls the steps
//! it needs before its own work, so that it runs from a fresh checkout
//! after the README's two commands as well as after `cargo xtask test`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::util::{repo_root, run_cmd};

/// OpenMPI, and what dgl-partition's `mpi` feature builds against (its
/// headers through bindgen, hence libclang).
pub const MPI_PACKAGES: [&str; 3] = ["openmpi-bin", "libopenmpi-dev", "libclang-dev"];

/// `cargo build --release -p <package>` (a no-op when it is up to date);
/// the path of its binary `bin` in `$CARGO_TARGET_DIR` or `target/`.
pub fn release_binary(package: &str, bin: &str) -> Result<PathBuf> {
    eprintln!("==> building {package} (release)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_cmd(Command::new(&cargo).args(["build", "--release", "-q", "-p", package]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let path = target.join("release").join(bin);
    if !path.is_file() {
        bail!(
            "`cargo build --release -p {package}` left no binary at {}",
            path.display()
        );
    }
    Ok(path)
}

/// Kubernetes, etcd and kwok, built from the Go module proxy when they are
/// not cached (20-30 min cold on 2 cores); when cached, each binary's
/// `--version` is checked (seconds).
pub fn kube_binaries_with_kwok() -> Result<localkube::Binaries> {
    let started = Instant::now();
    eprintln!("==> Kubernetes, etcd and kwok binaries (cached; built when missing)");
    let opts = localkube::BuildOptions::from_env()?;
    let bins = localkube::ensure_kwok(&opts).context("building Kubernetes, etcd and kwok")?;
    eprintln!(
        "    Kubernetes {}, etcd {}, kwok {}: ready in {:.1}s",
        bins.kubernetes_version,
        bins.etcd_version,
        bins.kwok_version,
        started.elapsed().as_secs_f64()
    );
    Ok(bins)
}

/// Installs the Debian packages that are missing (a no-op when all are
/// there); apt-get's output goes to `<cache>/logs/apt.log`.
pub fn apt(packages: &[&str]) -> Result<()> {
    let log_dir = localkube::cache_dir()?.join("logs");
    localkube::host::ensure_packages(packages, &log_dir)
        .with_context(|| format!("installing Debian packages {}", packages.join(" ")))?;
    Ok(())
}
