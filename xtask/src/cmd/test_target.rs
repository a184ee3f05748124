//! The test command's cargo target dir, kept in the cache so that a fresh
//! clone (what CI runs) finds its dependencies compiled: about 4 of the 5
//! minutes of a cold `clippy` + `cargo test --no-run` are the dependencies,
//! which no commit of ours changes.
//!
//! Only the workspace's own crates differ between checkouts (their
//! artifacts are named after the checkout's path), so when the checkout
//! changes they are removed (`cargo clean -p`), and a dir grown past
//! [`LIMIT_GIB`] anyway (a new lockfile's crates beside the old) is removed
//! whole: the cache must not fill the disk the test node's kubelet evicts
//! from.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::util::{repo_root, run_cmd};

/// Above this the dir is removed before the build.
const LIMIT_GIB: u64 = 24;
/// The checkout whose crates the dir holds.
const STAMP: &str = "dgl-operator-checkout";
/// The workspace's packages (Cargo.toml `members`).
const PACKAGES: [&str; 8] = [
    "dgl-api",
    "dgl-operator",
    "dglrun",
    "dgl-partition",
    "watcher-loop",
    "localkube",
    "xtask",
    "xtask-launcher",
];

/// Sets `CARGO_TARGET_DIR` for every cargo this command runs (and for the
/// image and benchmark steps, which read it) unless the user set it;
/// returns the dir used.
pub fn choose(cargo: &str) -> Result<PathBuf> {
    remap_checkout();
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let dir = localkube::cache_dir()?.join("test-target");
    prepare(cargo, &dir)?;
    std::env::set_var("CARGO_TARGET_DIR", &dir);
    Ok(dir)
}

/// The checkout's path is written into the binaries' debug line tables
/// (the compile's working dir): two clones of one commit would build
/// different bytes, and the images, keyed by the binaries' SHA-256, would
/// be built and imported into every node again (minutes for the training
/// image). Mapped to one name, they build the same bytes. Flags the user
/// set win.
fn remap_checkout() {
    if std::env::var_os("RUSTFLAGS").is_some()
        || std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
    {
        return;
    }
    let root = repo_root().display().to_string();
    std::env::set_var(
        "CARGO_ENCODED_RUSTFLAGS",
        format!("--remap-path-prefix={root}=/dgl-operator"),
    );
}

fn prepare(cargo: &str, dir: &Path) -> Result<()> {
    let size = dir_bytes(dir);
    if size > LIMIT_GIB << 30 {
        println!(
            "    {} holds {:.1} GiB (over {LIMIT_GIB}): removed, this build is cold",
            dir.display(),
            size as f64 / (1u64 << 30) as f64
        );
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = dir.join(STAMP);
    let root = repo_root().display().to_string();
    let previous = fs::read_to_string(&stamp).unwrap_or_default();
    if !previous.is_empty() && previous != root {
        println!(
            "    the cached target dir held {previous}'s crates: removing them (`cargo clean -p`)"
        );
        let mut cmd = Command::new(cargo);
        cmd.arg("clean").arg("--target-dir").arg(dir);
        for p in PACKAGES {
            cmd.args(["-p", p]);
        }
        run_cmd(&mut cmd)?;
    }
    fs::write(&stamp, &root).with_context(|| format!("writing {}", stamp.display()))?;
    println!(
        "    cargo target dir: {} (cached; set CARGO_TARGET_DIR to use another)",
        dir.display()
    );
    Ok(())
}

/// Bytes of the regular files under `dir` (0 if it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo clean -p` fails on a name that is not a package, and a
    /// package left out keeps another checkout's crates: both lists (this
    /// one and the dependency-free launcher's) are exactly the members.
    #[test]
    fn the_package_lists_are_the_workspace_members() {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(repo_root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut members: Vec<String> = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        members.sort();
        let mut ours: Vec<String> = PACKAGES.iter().map(|p| p.to_string()).collect();
        ours.sort();
        assert_eq!(ours, members);
        let launcher = fs::read_to_string(repo_root().join("xtask/launcher/src/main.rs")).unwrap();
        let start = launcher.find("const PACKAGES").unwrap();
        let list = &launcher[start..start + launcher[start..].find("];").unwrap()];
        let mut theirs: Vec<String> = list
            .split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        theirs.sort();
        assert_eq!(theirs, members, "xtask/launcher/src/main.rs's PACKAGES");
    }

    #[test]
    fn dir_bytes_counts_nested_files_and_a_missing_dir_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(dir_bytes(&tmp.path().join("none")), 0);
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/x"), [0u8; 10]).unwrap();
        fs::write(tmp.path().join("a/b/y"), [0u8; 32]).unwrap();
        assert_eq!(dir_bytes(tmp.path()), 42);
    }
}
