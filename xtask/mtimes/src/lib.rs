//! Cargo judges a workspace crate by file times: a source older than the
//! output of the crate's last build counts as unchanged. Two things follow
//! for a target dir kept in the project cache and shared by checkouts:
//! - a fresh clone (every CI run) has only new files, so every workspace
//!   crate compiles again although nothing changed (minutes on 2 cores);
//! - another checkout's older files pass for the ones the dir was built
//!   from, so its crates would not compile at all.
//!
//! [`align`] makes the times follow the content. The target dir keeps a
//! manifest: per file of the checkout, a hash of its content and the time
//! the file was given when that content was first seen. A file whose
//! content is in the manifest gets that time back; any other file gets the
//! present time, newer than every output in the dir. So a crate is fresh
//! exactly when its sources are the ones some finished build read after
//! their times were set, and a build that was stopped halfway leaves its
//! unbuilt crates stale for the next checkout too. [`align`] holds the
//! dir's lock: two commands aligning the same dir to different contents
//! would otherwise build one's crates for the other.
//!
//! Times go back only in a checkout that has built nothing in its own
//! `target/` (a fresh clone: only the launcher is there). In a developer's
//! checkout a time moved back could make `target/` take a crate built from
//! other content for fresh, so there a file's time only moves forward (to
//! the recorded time when that is newer).
//!
//! Paths a crate compiles in from its checkout (`env!("CARGO_MANIFEST_DIR")`)
//! would be wrong in another one: the workspace reads them at run time
//! instead (checked by xtask's `no_checkout_path_is_compiled_in` test).

use std::collections::HashMap;
use std::fs::{self, File, FileTimes, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The manifest's name in the target dir.
pub const MANIFEST: &str = "checkout-files.tsv";
/// The lock's name in the target dir.
pub const LOCK: &str = "checkout.lock";

/// What [`align`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Aligned {
    /// Files of the checkout (tracked, or untracked and not ignored).
    pub files: usize,
    /// Whether times could go back (no builds in the checkout's `target/`).
    pub back: bool,
    /// Of them, those whose content the manifest did not hold.
    pub changed: usize,
    /// Whether the dir had no manifest: its workspace crates may come from
    /// any checkout and must be removed (`cargo clean -p`).
    pub first_use: bool,
}

/// The target dir's lock, held while cargo builds in it.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

#[derive(Debug)]
pub enum Error {
    /// `git ls-files` could not list the checkout (not a git checkout?).
    Git(String),
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Git(e) => write!(f, "listing the checkout's files with git: {e}"),
            Error::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Locks `target` (waiting, with a line on stderr, while another command
/// holds it); the lock lasts as long as the returned value.
pub fn lock(target: &Path) -> Result<Lock, Error> {
    fs::create_dir_all(target).map_err(|e| Error::Io(target.to_path_buf(), e))?;
    let path = target.join(LOCK);
    let file = File::create(&path).map_err(|e| Error::Io(path.clone(), e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            eprintln!(
                "waiting for another command that builds in {} (its lock: {})",
                target.display(),
                path.display()
            );
            file.lock().map_err(|e| Error::Io(path.clone(), e))?;
        }
        Err(TryLockError::Error(e)) => return Err(Error::Io(path, e)),
    }
    Ok(Lock { _file: file })
}

/// Sets the times of `root`'s files from `target`'s manifest and writes
/// the manifest of this checkout (see the crate's doc). The caller holds
/// `target`'s [`lock`] from before this until its builds are done.
pub fn align(root: &Path, target: &Path, _lock: &Lock) -> Result<Aligned, Error> {
    let manifest_path = target.join(MANIFEST);
    let (known, first_use) = match fs::read_to_string(&manifest_path) {
        Ok(text) => (parse(&text), false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (HashMap::new(), true),
        Err(e) => return Err(Error::Io(manifest_path, e)),
    };
    let now = SystemTime::now();
    let back = !own_builds(root);
    let mut out = String::new();
    let mut aligned = Aligned {
        files: 0,
        back,
        changed: 0,
        first_use,
    };
    for rel in list(root)? {
        let path = root.join(&rel);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue; // deleted but still in the index
        };
        if !meta.is_file() {
            continue;
        }
        let bytes = fs::read(&path).map_err(|e| Error::Io(path.clone(), e))?;
        let hash = fnv1a(&bytes);
        let time = match known.get(&rel) {
            Some(&(h, t)) if h == hash => t,
            _ => {
                aligned.changed += 1;
                now
            }
        };
        let current = meta.modified().ok();
        let set = match current {
            Some(c) if !back && c > time => c,
            _ => time,
        };
        if current != Some(set) {
            let f = File::options()
                .write(true)
                .open(&path)
                .map_err(|e| Error::Io(path.clone(), e))?;
            f.set_times(FileTimes::new().set_modified(set))
                .map_err(|e| Error::Io(path.clone(), e))?;
        }
        aligned.files += 1;
        let nanos = time
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        out.push_str(&format!("{hash:016x}\t{nanos}\t{rel}\n"));
    }
    write_atomic(&manifest_path, out.as_bytes())?;
    Ok(aligned)
}

/// Whether the checkout's own `target/` holds builds of anything but the
/// launcher (`cargo xtask` builds it there, from files it has not aligned yet).
fn own_builds(root: &Path) -> bool {
    let Ok(profiles) = fs::read_dir(root.join("target")) else {
        return false;
    };
    profiles.flatten().any(|p| {
        fs::read_dir(p.path().join(".fingerprint")).is_ok_and(|units| {
            units.flatten().any(|u| {
                let name = u.file_name();
                let name = name.to_string_lossy();
                !name.starts_with("xtask-launcher-") && !name.starts_with("checkout-mtimes-")
            })
        })
    })
}

/// The checkout's files, relative to `root`: tracked, and untracked ones
/// git does not ignore (a new source file before `git add`).
fn list(root: &Path) -> Result<Vec<String>, Error> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .map_err(|e| Error::Git(e.to_string()))?;
    if !out.status.success() {
        return Err(Error::Git(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    let mut files: Vec<String> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::str::from_utf8(p).ok())
        // A tab or newline would break the manifest's lines.
        .filter(|p| !p.contains(['\t', '\n']))
        .map(str::to_owned)
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// The manifest's lines `hash<TAB>nanoseconds<TAB>path`; a line that does
/// not parse is left out (its file then counts as changed: safe).
fn parse(text: &str) -> HashMap<String, (u64, SystemTime)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.splitn(3, '\t');
            let hash = u64::from_str_radix(f.next()?, 16).ok()?;
            let nanos: u64 = f.next()?.parse().ok()?;
            let rel = f.next()?.to_owned();
            Some((rel, (hash, UNIX_EPOCH + Duration::from_nanos(nanos))))
        })
        .collect()
}

/// 64-bit FNV-1a: the manifest tells edits apart, it is no defence against
/// an attacker (who could edit the target dir directly anyway).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (bytes.len() as u64).rotate_left(32)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    let io = |e| Error::Io(tmp.clone(), e);
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(|e| Error::Io(path.to_path_buf(), e))
}

#[cfg(test)]
mod tests;
