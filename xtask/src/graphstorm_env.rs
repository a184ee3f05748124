//! The cached GraphStorm environment: GraphStorm 0.5.0.post1 and the packages
//! it needs beyond DGL, as a thin venv layered on the DGL venv
//! (`pyenv.rs`).
//!
//! GraphStorm's own requirements name torchdata 0.9, which breaks DGL 2.1.0,
//! so nothing here lets pip resolve: every package of
//! `examples/graphstorm/requirements.txt` is pinned and installed with
//! `--no-deps`. torch, DGL, torchdata 0.7.1 and the rest of DGL's pins come
//! from the DGL venv through a `.pth` file naming its site-packages, so this
//! venv holds only what GraphStorm adds (hundreds of MB, not the 5 GB of a
//! second torch; docs/user-guide.md "GraphStorm" has the figures).
//!
//! Reuse is decided by a stamp (sha256 of the requirements and of the DGL
//! venv's own stamp, so a rebuilt DGL venv rebuilds this one), written last
//! after an import check, as `pyenv.rs` does. Wheels are kept in
//! `<cache>/wheels-graphstorm/`, not in DGL's `<cache>/wheels/`: the
//! training image's cache key hashes that folder's listing (images/mod.rs), and
//! GraphStorm's wheels would rebuild its 5 GB Python layers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use localkube::image::sha256_hex;

use crate::pyenv::{lock_cache, run_to_stderr, write_atomically};

/// Folder below `<cache>/venv/`: what it holds and what it stands on.
const VENV_NAME: &str = "graphstorm-0.5.0.post1-on-dgl-2.1.0";
/// Requirements of the layer, relative to the repository root.
pub const REQUIREMENTS: &str = "examples/graphstorm/requirements.txt";
/// Its wheelhouse below the cache (see the module's comment).
pub(crate) const WHEELS_DIR: &str = "wheels-graphstorm";
/// The stamp file name, the same as the DGL venv's.
const STAMP_FILE: &str = ".dgl-operator-requirements.sha256";
/// The `.pth` file that puts the DGL venv's site-packages on `sys.path`.
const PTH_FILE: &str = "dgl_operator_dgl_venv.pth";
/// What must import: GraphStorm's node-prediction and embedding entry
/// points and its graph construction, on the DGL venv's DGL and torch.
const VERIFY_SNIPPET: &str = "import graphstorm, dgl, torch, torchdata; \
import graphstorm.gconstruct.construct_graph, graphstorm.run.gsgnn_np.gsgnn_np; \
import graphstorm.run.gsgnn_emb.gsgnn_node_emb; \
from importlib.metadata import version; \
print('graphstorm', version('graphstorm'), 'dgl', dgl.__version__, 'torch', torch.__version__, \
'torchdata', torchdata.__version__)";

/// Creates the GraphStorm venv on top of the DGL venv whose interpreter is
/// `dgl_python` if it is missing or stale; returns its interpreter.
pub fn ensure(repo_root: &Path, dgl_python: &Path) -> Result<PathBuf> {
    let requirements = repo_root.join(REQUIREMENTS);
    let want = wanted_stamp(&requirements, dgl_python)?;
    let cache = localkube::cache_dir()?;
    let venv = cache.join("venv").join(VENV_NAME);
    let python = venv.join("bin").join("python");
    let _lock = lock_cache(&venv)?;

    let stamp = venv.join(STAMP_FILE);
    let have = fs::read_to_string(&stamp).ok().map(|s| s.trim().to_owned());
    if have.as_deref() == Some(want.as_str()) && python.exists() {
        match verify(&python) {
            Ok(versions) => {
                eprintln!("graphstorm env: reusing {} ({versions})", venv.display());
                return Ok(python);
            }
            Err(e) => eprintln!("graphstorm env: existing venv is broken, rebuilding: {e:#}"),
        }
    }
    let started = std::time::Instant::now();
    create(&venv, dgl_python, &requirements, &cache.join(WHEELS_DIR))?;
    let versions = verify(&python)
        .with_context(|| format!("the new venv {} does not import GraphStorm", venv.display()))?;
    write_atomically(&stamp, format!("{want}\n").as_bytes())?;
    eprintln!(
        "graphstorm env: ready {} ({versions}) in {:.0} s",
        venv.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(python)
}

/// The stamp this venv must carry: the layer's requirements and the DGL
/// venv it stands on (its path and its own stamp).
fn wanted_stamp(requirements: &Path, dgl_python: &Path) -> Result<String> {
    let mut bytes = fs::read(requirements)
        .with_context(|| format!("reading requirements file {}", requirements.display()))?;
    let dgl_venv = dgl_python
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} is not <venv>/bin/python", dgl_python.display()))?;
    let dgl_stamp = dgl_venv.join(STAMP_FILE);
    let dgl_stamp_text = fs::read_to_string(&dgl_stamp).with_context(|| {
        format!(
            "the DGL venv has no stamp {} (build it first: `cargo xtask pyenv`)",
            dgl_stamp.display()
        )
    })?;
    bytes.extend_from_slice(dgl_venv.as_os_str().as_encoded_bytes());
    bytes.extend_from_slice(dgl_stamp_text.as_bytes());
    Ok(sha256_hex(&bytes))
}

/// A fresh venv (a venv hard-codes its own path, so it is rebuilt in place),
/// the `.pth` to the DGL venv, then the pinned wheels without resolution.
fn create(venv: &Path, dgl_python: &Path, requirements: &Path, wheels: &Path) -> Result<()> {
    if venv.exists() {
        fs::remove_dir_all(venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    eprintln!(
        "graphstorm env: creating {} on {}",
        venv.display(),
        dgl_python.display()
    );
    run_to_stderr(Command::new(dgl_python).arg("-m").arg("venv").arg(venv))
        .with_context(|| format!("creating the venv {}", venv.display()))?;
    let python = venv.join("bin").join("python");
    let dgl_site = site_packages(dgl_python)?;
    let own_site = site_packages(&python)?;
    // After the layer's own site-packages: the layer's pins win.
    write_atomically(
        &own_site.join(PTH_FILE),
        format!("{}\n", dgl_site.display()).as_bytes(),
    )?;

    fs::create_dir_all(wheels).with_context(|| format!("creating {}", wheels.display()))?;
    let pip = |verb: &str| {
        let mut c = Command::new(&python);
        c.args([
            "-m",
            "pip",
            verb,
            "--disable-pip-version-check",
            "--no-deps",
        ]);
        c
    };
    run_to_stderr(
        pip("download")
            .arg("--dest")
            .arg(wheels)
            .arg("-r")
            .arg(requirements),
    )
    .with_context(|| format!("pip download -r {} failed", requirements.display()))?;
    run_to_stderr(
        pip("install")
            .args(["--no-index", "--find-links"])
            .arg(wheels)
            .arg("-r")
            .arg(requirements),
    )
    .with_context(|| {
        format!(
            "pip install -r {} from {} failed",
            requirements.display(),
            wheels.display()
        )
    })
}

/// The interpreter's purelib folder (its site-packages).
fn site_packages(python: &Path) -> Result<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} could not name its site-packages: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The import check; returns the versions it printed.
fn verify(python: &Path) -> Result<String> {
    let out = Command::new(python)
        .args(["-c", VERIFY_SNIPPET])
        .env("DGLBACKEND", "pytorch")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} cannot import GraphStorm ({}): {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        crate::util::repo_root()
    }

    /// The venv's name promises these; GraphStorm 0.5.1 and torchdata 0.9
    /// do not import with DGL 2.1.0 + torch 2.2.1.
    #[test]
    fn requirements_pin_graphstorm_and_leave_torch_to_the_dgl_venv() {
        let req = fs::read_to_string(root().join(REQUIREMENTS)).unwrap();
        let pins: Vec<&str> = req
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        for pin in [
            "graphstorm==0.5.0.post1",
            "transformers==4.48.0",
            "tokenizers==0.21.4",
            "ogb==1.3.6",
        ] {
            assert!(pins.contains(&pin), "{REQUIREMENTS} lacks {pin}");
        }
        for line in &pins {
            assert!(
                line.contains("=="),
                "{REQUIREMENTS}: {line:?} is not pinned (installed --no-deps)"
            );
            let name = line.split("==").next().unwrap().to_ascii_lowercase();
            for dgl_owned in ["torch", "dgl", "torchdata", "numpy"] {
                assert_ne!(
                    name, dgl_owned,
                    "{REQUIREMENTS}: {dgl_owned} comes from the DGL venv"
                );
            }
        }
    }

    #[test]
    fn the_stamp_follows_the_dgl_venv() {
        let dir = tempfile_dir();
        let req = dir.join("req.txt");
        fs::write(&req, "graphstorm==0.5.0.post1\n").unwrap();
        let dgl = dir.join("dgl");
        fs::create_dir_all(dgl.join("bin")).unwrap();
        let py = dgl.join("bin/python");
        let e = wanted_stamp(&req, &py).unwrap_err().to_string();
        assert!(
            e.contains("has no stamp") && e.contains("cargo xtask pyenv"),
            "{e}"
        );
        fs::write(dgl.join(STAMP_FILE), "a\n").unwrap();
        let first = wanted_stamp(&req, &py).unwrap();
        fs::write(dgl.join(STAMP_FILE), "b\n").unwrap();
        assert_ne!(
            first,
            wanted_stamp(&req, &py).unwrap(),
            "a rebuilt DGL venv rebuilds this one"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("gs-env-test-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }
}
