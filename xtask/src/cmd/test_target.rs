//! The test command's cargo target dir, kept in the cache so that a fresh
//! clone (what CI runs) finds its crates compiled: a cold `clippy` +
//! `cargo test --no-run` is about 8 minutes on 2 cores, nearly all of it
//! work no change of ours redoes.
//!
//! Cargo judges the workspace's own crates by file times, which a fresh
//! clone makes all new; `checkout-mtimes` sets them from the files' content
//! (its doc says how that stays exact), under the dir's lock, held for the
//! whole command. So a clone of a commit tested before compiles nothing,
//! and one with a change compiles what the change touches. The build flags
//! carry nothing of the checkout's path (a flag that differs between clones
//! makes cargo rebuild every dependency), and the images strip the
//! binaries' debug info, which names the checkout
//! (`images::host_binaries`). A dir grown past [`LIMIT_GIB`] (a new
//! lockfile's crates beside the old) is removed whole: the cache must not
//! fill the disk the test node's kubelet evicts from.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::util::{repo_root, run_cmd};

/// Above this the dir is removed before the build.
const LIMIT_GIB: u64 = 24;
/// The workspace's packages (Cargo.toml `members`).
const PACKAGES: [&str; 9] = [
    "dgl-api",
    "dgl-operator",
    "dglrun",
    "dgl-partition",
    "watcher-loop",
    "localkube",
    "xtask",
    "xtask-launcher",
    "checkout-mtimes",
];

/// The cache's target dir's lock, held as long as this value (none when
/// the user set `CARGO_TARGET_DIR`).
pub struct TestTarget {
    _lock: Option<checkout_mtimes::Lock>,
}

/// Sets `CARGO_TARGET_DIR` for every cargo this command runs (and for the
/// image and benchmark steps, which read it) unless the user set it.
pub fn choose(cargo: &str) -> Result<TestTarget> {
    if std::env::var_os("CARGO_TARGET_DIR").is_some() {
        return Ok(TestTarget { _lock: None });
    }
    let dir = localkube::cache_dir()?.join("test-target");
    let lock = prepare(cargo, &dir)?;
    std::env::set_var("CARGO_TARGET_DIR", &dir);
    Ok(TestTarget { _lock: Some(lock) })
}

fn prepare(cargo: &str, dir: &Path) -> Result<checkout_mtimes::Lock> {
    let size = dir_bytes(dir);
    if size > LIMIT_GIB << 30 {
        println!(
            "    {} holds {:.1} GiB (over {LIMIT_GIB}): removed, this build is cold",
            dir.display(),
            size as f64 / (1u64 << 30) as f64
        );
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let lock = checkout_mtimes::lock(dir)?;
    let root = repo_root();
    let clean = match checkout_mtimes::align(&root, dir, &lock) {
        Ok(a) => {
            println!(
                "    checkout's file times set from their content: {} of {} file(s) new to {}{}",
                a.changed,
                a.files,
                dir.display(),
                if a.back {
                    ""
                } else {
                    " (times only moved forward: the checkout has builds of its own in target/)"
                }
            );
            a.first_use
        }
        Err(e) => {
            println!("    {e}: the workspace's crates are built again");
            true
        }
    };
    if clean {
        // A dir from before the manifest: its crates may be any checkout's.
        let mut cmd = Command::new(cargo);
        cmd.arg("clean").arg("--target-dir").arg(dir);
        for p in PACKAGES {
            cmd.args(["-p", p]);
        }
        run_cmd(&mut cmd)?;
    }
    println!(
        "    cargo target dir: {} (cached; set CARGO_TARGET_DIR to use another)",
        dir.display()
    );
    Ok(lock)
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

    /// The cached target dirs serve every checkout (`checkout-mtimes`), so
    /// a path compiled in would name another one: the workspace reads
    /// `CARGO_MANIFEST_DIR` at run time.
    #[test]
    fn no_checkout_path_is_compiled_in() {
        let needle = ["env!(\"CARGO", "_MANIFEST_DIR\")"].concat();
        let out = Command::new("git")
            .arg("-C")
            .arg(repo_root())
            .args([
                "ls-files",
                "--cached",
                "--others",
                "--exclude-standard",
                "*.rs",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        let mut found = Vec::new();
        for rel in String::from_utf8(out.stdout).unwrap().lines() {
            let Ok(text) = fs::read_to_string(repo_root().join(rel)) else {
                continue;
            };
            for (i, line) in text.lines().enumerate() {
                if line.contains(&needle) && !line.trim_start().starts_with("//") {
                    found.push(format!("{rel}:{}", i + 1));
                }
            }
        }
        assert!(found.is_empty(), "compile-time checkout paths: {found:?}");
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
