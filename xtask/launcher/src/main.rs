//! `cargo xtask` (the alias in `.cargo/config.toml`): runs the workspace's
//! xtask with its cargo target dir in the project cache
//! (`<cache>/xtask-target`), so that a fresh clone, as every CI run is,
//! finds xtask's dependencies compiled instead of spending minutes on them
//! in `<clone>/target`. Only the workspace's own crates compile again. A
//! `CARGO_TARGET_DIR` the user set wins.

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// The workspace's packages (its Cargo.toml `members`).
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
/// The checkout whose crates the target dir holds.
const STAMP: &str = "dgl-operator-checkout";

fn main() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut cmd = Command::new(&cargo);
    cmd.args(["run", "--quiet", "--package", "xtask", "--manifest-path"])
        // The workspace's manifest: `cargo xtask` runs from any folder of it.
        .arg(root.join("Cargo.toml"));
    if std::env::var_os("CARGO_TARGET_DIR").is_none() {
        if let Some(target) = cache_dir().map(|c| c.join("xtask-target")) {
            forget_other_checkout(&cargo, &root, &target);
            cmd.arg("--target-dir").arg(target);
        }
    }
    cmd.arg("--").args(std::env::args_os().skip(1));
    let err = cmd.exec();
    eprintln!(
        "cargo xtask: could not run {}: {err}",
        cargo.to_string_lossy()
    );
    exit(127);
}

/// The workspace's crates are named alike in every checkout and cargo
/// judges them by file times: another clone's xtask (its paths compiled
/// in) could pass for this one's. So a change of checkout removes them.
fn forget_other_checkout(cargo: &OsString, root: &Path, target: &Path) {
    let stamp = target.join(STAMP);
    let here = root.display().to_string();
    let before = fs::read_to_string(&stamp).unwrap_or_default();
    if !before.is_empty() && before != here {
        let mut clean = Command::new(cargo);
        clean.args(["clean", "--quiet", "--manifest-path"]);
        clean
            .arg(root.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target);
        for p in PACKAGES {
            clean.args(["-p", p]);
        }
        match clean.status() {
            Ok(s) if s.success() => {}
            other => {
                eprintln!(
                    "cargo xtask: removing {before}'s crates from {}: {other:?}",
                    target.display()
                );
                exit(1);
            }
        }
    }
    let written = fs::create_dir_all(target).and_then(|()| fs::write(&stamp, &here));
    if let Err(e) = written {
        eprintln!("cargo xtask: writing {}: {e}", stamp.display());
        exit(1);
    }
}

/// `$DGL_OPERATOR_CACHE`, else `$HOME/.cache/dgl-operator`: the rule of
/// `localkube::cache_dir`, which this dependency-free crate cannot call.
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("DGL_OPERATOR_CACHE")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".cache").join("dgl-operator"))
        })
}
