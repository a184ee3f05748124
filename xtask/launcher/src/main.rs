//! `cargo xtask` (the alias in `.cargo/config.toml`): builds the
//! workspace's xtask with its cargo target dir in the project cache
//! (`<cache>/xtask-target`) and runs it, so that a fresh clone, as every
//! CI run is, finds xtask compiled instead of spending minutes on it in
//! `<clone>/target`. The checkout's file times are first set from their
//! content (`checkout-mtimes`): a clone of a commit built before compiles
//! nothing, and another checkout's crates never pass for this one's. A
//! `CARGO_TARGET_DIR` the user set wins (then this is a plain `cargo run`).

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// The workspace's packages (its Cargo.toml `members`).
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

fn main() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    // Read at run time (cargo run sets it): a path compiled in would name
    // the checkout that built this launcher.
    let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") else {
        fail("CARGO_MANIFEST_DIR is not set: run this as `cargo xtask`");
    };
    let root = Path::new(&dir).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    let target = match (std::env::var_os("CARGO_TARGET_DIR"), cache_dir()) {
        (None, Some(cache)) => cache.join("xtask-target"),
        _ => {
            let mut cmd = Command::new(&cargo);
            cmd.env_remove("CARGO_MANIFEST_DIR")
                .args(["run", "--quiet", "--package", "xtask", "--manifest-path"])
                // The workspace's manifest: `cargo xtask` runs from any folder of it.
                .arg(root.join("Cargo.toml"))
                .arg("--")
                .args(std::env::args_os().skip(1));
            let err = cmd.exec();
            fail(&format!("could not run {}: {err}", cargo.to_string_lossy()));
        }
    };
    let bin = build(&cargo, &root, &target);
    let err = Command::new(&bin)
        .args(std::env::args_os().skip(1))
        // As `cargo run` sets it; xtask finds the workspace by it.
        .env("CARGO_MANIFEST_DIR", root.join("xtask"))
        .exec();
    fail(&format!("could not run {}: {err}", bin.display()));
}

/// Builds xtask in `target` under the dir's lock and returns a link of
/// its own to the binary (a build from another checkout may replace the
/// binary once the lock is released; the link keeps this one).
fn build(cargo: &OsString, root: &Path, target: &Path) -> PathBuf {
    let lock = checkout_mtimes::lock(target).unwrap_or_else(|e| fail(&e.to_string()));
    let clean = match checkout_mtimes::align(root, target, &lock) {
        Ok(a) => a.first_use,
        Err(e) => {
            eprintln!("cargo xtask: {e}; the workspace's crates are built again");
            true
        }
    };
    if clean {
        // A dir from before the manifest: its crates may be any checkout's.
        let mut c = Command::new(cargo);
        c.env_remove("CARGO_MANIFEST_DIR")
            .args(["clean", "--quiet", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target);
        for p in PACKAGES {
            c.args(["-p", p]);
        }
        run(c, "removing the workspace's crates");
    }
    // Not the launcher's own CARGO_MANIFEST_DIR (cargo run sets it): build
    // scripts that read it make cargo track its value, the checkout's path,
    // and rebuild them (ring, and all above it) in every new clone.
    let mut c = Command::new(cargo);
    c.env_remove("CARGO_MANIFEST_DIR")
        .args(["build", "--quiet", "--package", "xtask", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target);
    run(c, "building xtask");
    let runs = target.join("run");
    forget_ended_runs(&runs);
    let link = runs.join(format!("xtask-{}", std::process::id()));
    let _ = fs::remove_file(&link);
    fs::create_dir_all(&runs)
        .and_then(|()| fs::hard_link(target.join("debug").join("xtask"), &link))
        .unwrap_or_else(|e| fail(&format!("linking {}: {e}", link.display())));
    drop(lock);
    link
}

/// Removes the links of runs whose process has ended (named by pid; exec
/// keeps the pid).
fn forget_ended_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("xtask-"));
        if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
            let _ = fs::remove_file(e.path());
        }
    }
}

fn run(mut c: Command, what: &str) {
    match c.status() {
        Ok(s) if s.success() => {}
        Ok(s) => exit(s.code().unwrap_or(1)),
        Err(e) => fail(&format!("{what}: {e}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("cargo xtask: {msg}");
    exit(1);
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
