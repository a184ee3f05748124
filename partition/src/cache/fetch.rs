//! Lookup of an entry and the download of one worker's files, each
//! verified by size and SHA-256 while it streams into a temporary file
//! beside its place; only a verified file is renamed into place, and a
//! failed one is removed (a corrupted cached part is never trained on).

use std::io::Write;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};

use super::manifest::{FileEntry, Manifest, MANIFEST, MAX_MANIFEST_BYTES};
use super::{client, runtime, store_error, Cache, Key};
use crate::{Error, Result};

impl Cache {
    /// The manifest of entry `key`: `None` when it has none (never
    /// uploaded, or an upload that did not finish); an error naming the
    /// manifest's object when it cannot be read or is malformed.
    pub fn lookup(&self, key: &Key) -> Result<Option<Manifest>> {
        let object = self.object(key, MANIFEST)?;
        let name = self.name(&object);
        let store = client(self)?;
        let rt = runtime(&name)?;
        let got = match rt.block_on(store.get(&object)) {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_error(&name, &e)),
        };
        // Its size is checked before its body is read.
        if got.meta.size > MAX_MANIFEST_BYTES {
            return Err(Error::input(
                &name,
                "",
                format!(
                    "{} bytes; expected a manifest of at most {MAX_MANIFEST_BYTES}",
                    got.meta.size
                ),
            ));
        }
        let bytes = rt
            .block_on(got.bytes())
            .map_err(|e| store_error(&name, &e))?;
        Manifest::parse(&name, &bytes, key.as_str()).map(Some)
    }

    /// Downloads the shared files and part `part`'s into `dest` (as they
    /// lie in the output folder: `<graph>.json`, `part<i>/...`), each
    /// verified; returns the bytes fetched. `manifest` is one
    /// [`Cache::lookup`] returned (its paths are checked).
    pub fn fetch_part(&self, manifest: &Manifest, part: u32, dest: &Path) -> Result<u64> {
        if part >= manifest.num_parts {
            return Err(Error::Config(format!(
                "part {part} of a partition cache entry of {} parts",
                manifest.num_parts
            )));
        }
        let key = Key::from_hex(&manifest.key)?;
        // Checked again: a caller may have built or changed it.
        manifest.check(&self.name(&self.object(&key, MANIFEST)?), key.as_str())?;
        let store = client(self)?;
        let mut total = 0u64;
        for entry in manifest.files_of(part) {
            let object = self.object(&key, &entry.path)?;
            let target = dest.join(&entry.path);
            total += fetch_file(store.as_ref(), &object, &self.name(&object), entry, &target)?;
        }
        tracing::info!(
            cache = %self.url(),
            key = %key,
            part,
            bytes = total,
            "partitions fetched from the partition cache"
        );
        Ok(total)
    }
}

/// A temporary file removed on drop unless kept.
struct Partial {
    path: PathBuf,
    kept: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `.<name>.partial-<pid>` beside `target`.
fn partial_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// One verified file into `target`; its size.
fn fetch_file(
    store: &dyn ObjectStore,
    object: &ObjectPath,
    name: &Path,
    entry: &FileEntry,
    target: &Path,
) -> Result<u64> {
    let rt = runtime(name)?;
    let got = rt
        .block_on(store.get(object))
        .map_err(|e| store_error(name, &e))?;
    if got.meta.size != entry.size {
        return Err(Error::input(
            name,
            "",
            format!(
                "{} bytes, the manifest says {}: the cached file is not the one uploaded",
                got.meta.size, entry.size
            ),
        ));
    }
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let mut partial = Partial {
        path: partial_path(target),
        kept: false,
    };
    let file = std::fs::File::create(&partial.path).map_err(|e| Error::io(&partial.path, e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut hash = Sha256::new();
    let mut received = 0u64;
    let mut stream = got.into_stream();
    while let Some(chunk) = rt.block_on(stream.next()) {
        let chunk = chunk.map_err(|e| store_error(name, &e))?;
        received = received.saturating_add(chunk.len() as u64);
        if received > entry.size {
            return Err(Error::input(
                name,
                "",
                format!("more than the manifest's {} bytes", entry.size),
            ));
        }
        hash.update(&chunk);
        out.write_all(&chunk)
            .map_err(|e| Error::io(&partial.path, e))?;
    }
    let actual = hex::encode(hash.finalize());
    if received != entry.size || actual != entry.sha256 {
        return Err(Error::input(
            name,
            "",
            format!(
                "{received} bytes with SHA-256 {actual}, expected {} bytes with SHA-256 {} \
                 (the manifest's): the cached file is corrupted and was not kept",
                entry.size, entry.sha256
            ),
        ));
    }
    let file = out
        .into_inner()
        .map_err(|e| Error::io(&partial.path, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(&partial.path, e))?;
    std::fs::rename(&partial.path, target).map_err(|e| Error::io(target, e))?;
    partial.kept = true;
    Ok(received)
}
