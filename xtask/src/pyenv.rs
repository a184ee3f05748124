//! `cargo xtask pyenv`: the cached Python virtualenv with DGL 2.1.0 + torch 2.2.1.
//!
//! The example scripts in `examples/graphsage/` and the end-to-end tests need
//! DGL, which pulls about 3.5 GB of torch/CUDA wheels. The venv therefore lives
//! outside the work tree, in `$DGL_OPERATOR_CACHE` (default
//! `$HOME/.cache/dgl-operator`) under `venv/dgl-2.1.0-torch-2.2.1/`, and is
//! reused for as long as `examples/graphsage/requirements.txt` is unchanged.
//!
//! Reuse is decided by a stamp file inside the venv holding the sha256 of the
//! requirements file. The stamp is written last, after an import check, so a
//! half-built venv (interrupted install) never counts as ready and is rebuilt.
//!
//! Wheels are kept in `<cache>/wheels/` (`pip download`, then an offline
//! `pip install --no-index --find-links`): pip's own HTTP cache stays empty
//! here because the package mirror sends no caching headers, so without the
//! wheelhouse every rebuild would fetch ~2.5 GB again.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use localkube::image::sha256_hex;

/// Folder name of the venv below `<cache>/venv/`; names the pinned versions so
/// that a future pin gets a new folder instead of clobbering this one.
const VENV_NAME: &str = "dgl-2.1.0-torch-2.2.1";
/// Requirements file, relative to the repository root.
const REQUIREMENTS: &str = "examples/graphsage/requirements.txt";
/// Inside the venv: sha256 of the requirements the venv was built from.
const STAMP_FILE: &str = ".dgl-operator-requirements.sha256";
/// Proves the venv works: both imports must succeed (DGL fails to import with
/// a torch it has no GraphBolt library for).
const VERIFY_SNIPPET: &str = "import dgl, torch; print(dgl.__version__, torch.__version__)";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print only the interpreter path on stdout (all progress goes to stderr),
    /// for use as `PY=$(cargo xtask pyenv --print-python)`.
    #[arg(long)]
    pub(crate) print_python: bool,
    /// Rebuild the venv even if its stamp matches the requirements.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Create the DGL venv if it is missing or stale, and return its interpreter.
///
/// Idempotent and safe to call from concurrent xtask processes (an exclusive
/// lock serialises them; the second one finds the stamp and returns). Child
/// output goes to stderr so callers can keep stdout for their own results.
pub fn ensure_venv(repo_root: &Path) -> Result<PathBuf> {
    let requirements = repo_root.join(REQUIREMENTS);
    let req_bytes = fs::read(&requirements)
        .with_context(|| format!("reading requirements file {}", requirements.display()))?;
    let want = sha256_hex(&req_bytes);

    let venv = venv_dir()?;
    let python = venv.join("bin").join("python");
    let _lock = lock_cache(&venv)?;

    let stamp = venv.join(STAMP_FILE);
    let have = fs::read_to_string(&stamp).ok().map(|s| s.trim().to_owned());
    if have.as_deref() == Some(want.as_str()) && python.exists() {
        match verify(&python) {
            Ok(versions) => {
                eprintln!("pyenv: reusing {} ({versions})", venv.display());
                return Ok(python);
            }
            // A stamped venv that no longer imports (e.g. its base interpreter
            // was removed) is rebuilt rather than reported as ready.
            Err(e) => eprintln!("pyenv: existing venv is broken, rebuilding: {e:#}"),
        }
    } else if let Some(have) = have {
        eprintln!(
            "pyenv: {} is stale (requirements sha256 {have} != {want}), rebuilding",
            venv.display()
        );
    } else if venv.exists() {
        // Interrupted build, or --force removed the stamp.
        eprintln!("pyenv: {} has no stamp, rebuilding", venv.display());
    }

    create(&venv, &requirements)?;
    let versions = verify(&python).with_context(|| {
        format!(
            "the new venv {} does not import dgl and torch",
            venv.display()
        )
    })?;
    write_atomically(&stamp, format!("{want}\n").as_bytes())?;
    eprintln!("pyenv: ready {} ({versions})", venv.display());
    Ok(python)
}

/// `$DGL_OPERATOR_CACHE`, else `$HOME/.cache/dgl-operator`.
fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("DGL_OPERATOR_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither DGL_OPERATOR_CACHE nor HOME is set; cannot place the venv cache")?;
    Ok(PathBuf::from(home).join(".cache").join("dgl-operator"))
}

pub(crate) fn venv_dir() -> Result<PathBuf> {
    Ok(cache_dir()?.join("venv").join(VENV_NAME))
}

/// The interpreter the venv is made from: `$DGL_OPERATOR_PYTHON`, else `python3`.
/// CPython 3.11 is the version the pinned DGL/torch wheels are checked with.
fn base_python() -> String {
    std::env::var("DGL_OPERATOR_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".to_owned())
}

/// Debian's python3 makes venvs only with the package python3-venv (its
/// ensurepip); installed when the interpreter lacks it.
fn ensure_venv_module(base: &str) -> Result<()> {
    let has = Command::new(base)
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        crate::ensure::apt(&["python3-venv"])?;
    }
    Ok(())
}

fn create(venv: &Path, requirements: &Path) -> Result<()> {
    // Rebuild in place: a venv hard-codes its own path (scripts' shebangs,
    // pyvenv.cfg), so it cannot be built elsewhere and renamed.
    remove_stamp(venv)?;
    if venv.exists() {
        fs::remove_dir_all(venv)
            .with_context(|| format!("removing stale venv {}", venv.display()))?;
    }
    let parent = venv.parent().context("venv path has no parent")?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;

    let base = base_python();
    ensure_venv_module(&base)?;
    eprintln!("pyenv: creating {} with {base}", venv.display());
    run_to_stderr(Command::new(&base).arg("-m").arg("venv").arg(venv)).with_context(|| {
        format!(
            "`{base} -m venv {}` failed (set DGL_OPERATOR_PYTHON to another interpreter?)",
            venv.display()
        )
    })?;
    let python = venv.join("bin").join("python");

    let wheels = download(&python, requirements)?;

    eprintln!("pyenv: installing from {}", wheels.display());
    run_to_stderr(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-index",
            ])
            .arg("--find-links")
            .arg(&wheels)
            .arg("-r")
            .arg(requirements),
    )
    .with_context(|| {
        format!(
            "pip install -r {} from {} failed",
            requirements.display(),
            wheels.display()
        )
    })?;
    Ok(())
}

/// Only the wheelhouse, which the training image installs from: the
/// images alone (the demo) need no 5 GB environment installed on the host.
/// `pip download` runs in a small venv of its own (Debian's Python may
/// have no pip).
pub fn ensure_wheels(repo_root: &Path) -> Result<PathBuf> {
    let requirements = repo_root.join(REQUIREMENTS);
    let tool = cache_dir()?.join("venv").join("pip-download");
    // The venv's lock: its build downloads into the same wheelhouse.
    let _lock = lock_cache(&venv_dir()?)?;
    let python = tool.join("bin").join("python");
    if !python.exists() {
        let base = base_python();
        ensure_venv_module(&base)?;
        run_to_stderr(Command::new(&base).arg("-m").arg("venv").arg(&tool))
            .with_context(|| format!("`{base} -m venv {}` failed", tool.display()))?;
    }
    download(&python, &requirements)
}

/// `pip download` of the requirements into the cache's wheelhouse.
fn download(python: &Path, requirements: &Path) -> Result<PathBuf> {
    // Files already in the wheelhouse are not fetched again; pip still asks
    // the index to resolve, which takes seconds.
    let wheels = cache_dir()?.join("wheels");
    fs::create_dir_all(&wheels).with_context(|| format!("creating {}", wheels.display()))?;
    eprintln!(
        "pyenv: downloading {} into {} (~2.5 GB of torch/CUDA wheels the first time)",
        requirements.display(),
        wheels.display()
    );
    run_to_stderr(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--dest",
            ])
            .arg(&wheels)
            .arg("-r")
            .arg(requirements),
    )
    .with_context(|| format!("pip download -r {} failed", requirements.display()))?;
    Ok(wheels)
}

/// Run the import check and return its output ("<dgl version> <torch version>").
fn verify(python: &Path) -> Result<String> {
    let out = Command::new(python)
        .args(["-c", VERIFY_SNIPPET])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "`{} -c '{VERIFY_SNIPPET}'` exited with {}: {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Run a child with stdout redirected to our stderr (keeps our stdout clean).
pub(crate) fn run_to_stderr(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(io::stderr()))
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} exited with {status}", cmd.get_program());
    }
    Ok(())
}

pub(crate) fn remove_stamp(venv: &Path) -> Result<()> {
    let stamp = venv.join(STAMP_FILE);
    match fs::remove_file(&stamp) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", stamp.display())),
    }
}

pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut name = path
        .file_name()
        .context("path has no file name")?
        .to_owned();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Exclusive advisory lock next to the venv (`<venv>.lock`), held until the
/// returned file is dropped. flock is released by the kernel if we die.
pub(crate) fn lock_cache(venv: &Path) -> Result<File> {
    // Append rather than with_extension: the venv name ends in ".1".
    let mut name = venv
        .file_name()
        .context("venv path has no file name")?
        .to_owned();
    name.push(".lock");
    let lock_path = venv.with_file_name(name);
    if let Some(parent) = lock_path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening lock file {}", lock_path.display()))?;
    // SAFETY: flock on a file descriptor we own; it stays open for the lock's lifetime.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!(
            "pyenv: waiting for another process holding {}",
            lock_path.display()
        );
        // SAFETY: as above; blocking variant.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("locking {}", lock_path.display()));
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::repo_root;

    #[test]
    fn sha256_matches_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn requirements_pin_the_checked_versions() {
        // The venv folder name promises these versions; keep the file honest.
        let req = fs::read_to_string(repo_root().join(REQUIREMENTS)).unwrap();
        for pin in ["torch==2.2.1", "dgl==2.1.0", "torchdata==0.7.1"] {
            assert!(
                req.lines().any(|l| l.trim() == pin),
                "{REQUIREMENTS} lacks {pin}"
            );
        }
    }
}
