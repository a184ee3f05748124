//! The output folder's files as both drivers write them: nothing
//! half-written looks complete. Parts are written into a staging folder
//! inside the output folder (same filesystem: renames are atomic) and moved
//! into place when done; the partition JSON is written last, through a
//! rename; an earlier JSON is removed before anything else is written.

use std::path::{Path, PathBuf};

use crate::assign::{self, Assignment};
use crate::model::InputGraph;
use crate::output::json::part_dir;
use crate::{Error, Result};

/// Folder below the output that holds the assignment in DGL's format
/// (`<ntype>.txt` + `partition_meta.json`), so DGL's tools can reuse it.
pub const ASSIGNMENT_DIR: &str = "partition_assignment";

/// Creates the output folder and removes an earlier `<graph>.json`, whose
/// path it returns: until the new one is written, none exists.
pub(crate) fn prepare_out(out: &Path, graph_name: &str) -> Result<PathBuf> {
    crate::names::check_config("the graph name", graph_name)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let json = out.join(format!("{graph_name}.json"));
    remove_if_exists(&json)?;
    Ok(json)
}

/// Writes the assignment in DGL's format into `<out>/partition_assignment`.
pub(crate) fn write_assignment(out: &Path, a: &Assignment, g: &InputGraph) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    assign::write_files(a, g, &out.join(ASSIGNMENT_DIR))
}

/// The staging folder inside the output folder (same filesystem, so the
/// final renames are atomic); removed on drop unless published.
pub(crate) struct Staging {
    pub(crate) dir: PathBuf,
    published: bool,
}

impl Staging {
    /// `.<tag>.partial-<pid>` inside `out`.
    pub(crate) fn create(out: &Path, tag: &str) -> Result<Self> {
        crate::names::check_config("the staging folder's name", tag)?;
        let dir = out.join(format!(".{tag}.partial-{}", std::process::id()));
        remove_dir_if_exists(&dir)?;
        std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(Staging {
            dir,
            published: false,
        })
    }

    /// Moves the parts into `out` and writes the JSON last; returns the
    /// JSON's bytes.
    pub(crate) fn publish(self, out: &Path, parts: &[u32], json: &Path, text: &str) -> Result<u64> {
        self.move_parts(out, parts)?;
        write_json(&self.dir.join("partition.json"), json, text)?;
        self.finish()?;
        Ok(text.len() as u64)
    }

    /// Moves the staged `part<i>` folders into `out`, replacing old ones.
    pub(crate) fn move_parts(&self, out: &Path, parts: &[u32]) -> Result<()> {
        for &p in parts {
            let (from, to) = (self.dir.join(part_dir(p)), out.join(part_dir(p)));
            remove_dir_if_exists(&to)?;
            std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
        }
        Ok(())
    }

    /// Removes the (published) staging folder.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.published = true;
        std::fs::remove_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))
    }
}

/// Writes the partition JSON to `tmp` (same filesystem) and renames it,
/// so that it appears whole or not at all.
pub(crate) fn write_json(tmp: &Path, json: &Path, text: &str) -> Result<()> {
    std::fs::write(tmp, text).map_err(|e| Error::io(tmp, e))?;
    std::fs::rename(tmp, json).map_err(|e| Error::io(json, e))
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes file `p`; one that is not there is fine.
pub(crate) fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(p, e)),
        _ => Ok(()),
    }
}

/// Removes folder `p` and what it holds; one that is not there is fine.
pub(crate) fn remove_dir_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(p, e)),
        _ => Ok(()),
    }
}

/// The bytes of the files directly in `dir`.
pub(crate) fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        total += entry
            .metadata()
            .map_err(|e| Error::io(entry.path(), e))?
            .len();
    }
    Ok(total)
}
