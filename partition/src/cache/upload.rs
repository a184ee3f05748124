//! A finished partition output folder into the cache: every file under
//! `s3://bucket/prefix/<key>/<relative path>`, hashed as it is read, then
//! `manifest.json` last. An earlier manifest of the key is deleted first,
//! so that while files are replaced the entry is a miss.
//!
//! Parts made on different machines (partition mode DistParMETIS) are
//! uploaded in three steps: [`Cache::begin`] (the old manifest deleted),
//! [`Cache::upload_part`] on each machine (its part, and on one of them the
//! shared files), then [`Cache::commit`] of every machine's entries (the
//! manifest, last).

use std::io::Read;
use std::path::{Path, PathBuf};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};

use super::manifest::{
    check_path, FileEntry, Manifest, Owner, MANIFEST, MAX_MANIFEST_BYTES, MAX_PARTS,
};
use super::{client, runtime, store_error, Cache, Key};
use crate::{Error, Result};

/// Files up to this size are one PUT; larger ones a multipart upload.
const SINGLE_PUT: u64 = 8 << 20;

/// The multipart upload's part size (S3's least is 5 MiB).
const PART_SIZE: usize = 8 << 20;

/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 2;

impl Cache {
    /// Uploads output folder `dir` (DGL's partition JSON at its top, each
    /// `part<i>/`, anything else the pipeline wrote) as entry `key`;
    /// returns the manifest written. `dir` must be finished: one partition
    /// JSON at the top naming `num_parts`, a `part<i>/` for each part, no
    /// staging folder or symlink.
    pub fn upload(&self, key: &Key, dir: &Path) -> Result<Manifest> {
        let files = list(dir)?;
        let num_parts = check_finished(dir, &files)?;
        self.begin(key)?;
        let entries = self.put_files(key, &files)?;
        self.commit(key, num_parts, entries)
    }

    /// The first step of an entry whose parts lie on different machines
    /// (partition mode DistParMETIS: part `i` on worker `i`): deletes the
    /// key's manifest, so that the entry is a miss while its files are
    /// replaced. Then each machine calls [`Cache::upload_part`], and one
    /// [`Cache::commit`]s what they uploaded.
    pub fn begin(&self, key: &Key) -> Result<()> {
        let store = client(self)?;
        let manifest_obj = self.object(key, MANIFEST)?;
        let manifest_name = self.name(&manifest_obj);
        let rt = runtime(&manifest_name)?;
        match rt.block_on(store.delete(&manifest_obj)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(&manifest_name, &e)),
        }
    }

    /// Uploads from output folder `dir` the files of part `part` (below
    /// `part<part>/`) and, with `shared`, the files outside every part's
    /// folder (the partition JSON, which must name `num_parts`, and the
    /// assignment); returns their entries for [`Cache::commit`]. Other
    /// parts' folders in `dir` are left out. The entry is not a hit until
    /// it is committed.
    pub fn upload_part(
        &self,
        key: &Key,
        dir: &Path,
        part: u32,
        num_parts: u32,
        shared: bool,
    ) -> Result<Vec<FileEntry>> {
        if part >= num_parts {
            return Err(Error::Config(format!(
                "part {part} of an entry of {num_parts} parts"
            )));
        }
        let files: Vec<(String, PathBuf)> = list(dir)?
            .into_iter()
            .filter(|(rel, _)| match Owner::of_path(rel) {
                Some(Owner::Part(p)) => p == part,
                _ => shared,
            })
            .collect();
        if !files
            .iter()
            .any(|(rel, _)| Owner::of_path(rel) == Some(Owner::Part(part)))
        {
            return Err(refuse(&dir.join(format!("part{part}")), "missing or empty"));
        }
        if shared {
            let named = json_num_parts(dir, &files)?;
            if named != num_parts {
                let why = format!("the partition JSON names {named} parts, expected {num_parts}");
                return Err(refuse(dir, &why));
            }
        }
        let entries = self.put_files(key, &files)?;
        tracing::info!(
            cache = %self.url(),
            key = %key,
            part,
            files = entries.len(),
            bytes = entries.iter().fold(0u64, |t, f| t.saturating_add(f.size)),
            "part uploaded to the partition cache (not an entry until committed)"
        );
        Ok(entries)
    }

    /// The last step of an upload: writes entry `key`'s manifest listing
    /// `files` (every part's, as [`Cache::upload_part`] returned them),
    /// after checking them as a manifest that is read is checked (every
    /// part and the partition JSON listed, plain paths) and that each is in
    /// the bucket with its size. Only then is the entry a hit.
    pub fn commit(&self, key: &Key, num_parts: u32, mut files: Vec<FileEntry>) -> Result<Manifest> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let manifest = Manifest::new(key.as_str(), num_parts, files);
        let store = client(self)?;
        let manifest_obj = self.object(key, MANIFEST)?;
        let manifest_name = self.name(&manifest_obj);
        manifest.check(&manifest_name, key.as_str())?;
        let rt = runtime(&manifest_name)?;
        for f in &manifest.files {
            let object = self.object(key, &f.path)?;
            let name = self.name(&object);
            let meta = rt
                .block_on(store.head(&object))
                .map_err(|e| store_error(&name, &e))?;
            if meta.size != f.size {
                return Err(Error::input(
                    &name,
                    "",
                    format!(
                        "{} bytes in the bucket, {} reported by its uploader: not committed",
                        meta.size, f.size
                    ),
                ));
            }
        }
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Stage {
            stage: "partition cache",
            message: format!("cannot encode the manifest: {e}"),
        })?;
        rt.block_on(store.put(&manifest_obj, PutPayload::from(text)))
            .map_err(|e| store_error(&manifest_name, &e))?;
        tracing::info!(
            cache = %self.url(),
            key = %key,
            files = manifest.files.len(),
            bytes = manifest.total_bytes(),
            num_parts,
            "partitions uploaded to the partition cache"
        );
        Ok(manifest)
    }

    /// Uploads `files` (relative path, path) under `key`; their entries.
    fn put_files(&self, key: &Key, files: &[(String, PathBuf)]) -> Result<Vec<FileEntry>> {
        let store = client(self)?;
        let mut entries = Vec::with_capacity(files.len());
        for (rel, path) in files {
            let object = self.object(key, rel)?;
            let name = self.name(&object);
            let rt = runtime(&name)?;
            let (size, sha256) = put_file(rt, store.as_ref(), &object, &name, path)?;
            let part = Owner::of_path(rel).unwrap_or(Owner::Other);
            entries.push(FileEntry {
                path: rel.clone(),
                size,
                sha256,
                part,
            });
        }
        Ok(entries)
    }
}

/// Every file below `dir` as (relative `/`-separated path, path), sorted.
fn list(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let entry = entry.map_err(|e| Error::io(&d, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
            let rel = path
                .strip_prefix(dir)
                .ok()
                .and_then(|r| r.to_str())
                .map(str::to_string)
                .ok_or_else(|| refuse(&path, "a name that is not UTF-8"))?;
            if let Err(why) = check_path(&rel) {
                return Err(refuse(&path, &why));
            }
            if rel.split('/').any(|s| s.starts_with('.')) {
                return Err(refuse(
                    &path,
                    "a hidden or staging entry (a run not finished?)",
                ));
            }
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_file() {
                out.push((rel, path));
            } else {
                return Err(refuse(&path, "not a regular file or folder (a symlink?)"));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn refuse(path: &Path, why: &str) -> Error {
    Error::input(
        path,
        "",
        format!("{why}; expected a finished partition output folder"),
    )
}

/// The partition JSON's `num_parts`, after checking that `files` are a
/// finished output: one JSON at the top, a `part<i>/` for each part.
fn check_finished(dir: &Path, files: &[(String, PathBuf)]) -> Result<u32> {
    let num_parts = json_num_parts(dir, files)?;
    for p in 0..num_parts {
        if !files
            .iter()
            .any(|(rel, _)| Owner::of_path(rel) == Some(Owner::Part(p)))
        {
            return Err(refuse(&dir.join(format!("part{p}")), "missing or empty"));
        }
    }
    if let Some((rel, _)) = files
        .iter()
        .find(|(rel, _)| matches!(Owner::of_path(rel), Some(Owner::Part(p)) if p >= num_parts))
    {
        let why = format!("a part past the partition JSON's num_parts {num_parts}");
        return Err(refuse(&dir.join(rel), &why));
    }
    Ok(num_parts)
}

/// The `num_parts` of the one partition JSON at the top of `files`.
fn json_num_parts(dir: &Path, files: &[(String, PathBuf)]) -> Result<u32> {
    let jsons: Vec<&PathBuf> = files
        .iter()
        .filter(|(rel, _)| !rel.contains('/') && rel.ends_with(".json"))
        .map(|(_, p)| p)
        .collect();
    let [json] = jsons[..] else {
        return Err(refuse(
            dir,
            &format!(
                "{} JSON files at the top, expected one partition JSON",
                jsons.len()
            ),
        ));
    };
    let len = std::fs::metadata(json)
        .map_err(|e| Error::io(json, e))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(Error::input(
            json,
            "",
            format!("{len} bytes; expected a partition JSON"),
        ));
    }
    let bytes = std::fs::read(json).map_err(|e| Error::io(json, e))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::input(json, format!("line {}", e.line()), format!("not JSON: {e}")))?;
    let num_parts = value
        .get("num_parts")
        .and_then(|v| v.as_u64())
        .filter(|n| (1..=u64::from(MAX_PARTS)).contains(n))
        .ok_or_else(|| {
            Error::input(
                json,
                "num_parts",
                format!("expected a count of 1 to {MAX_PARTS}"),
            )
        })? as u32;
    Ok(num_parts)
}

/// Uploads one file, hashing what is sent; its size and SHA-256.
fn put_file(
    rt: &tokio::runtime::Runtime,
    store: &dyn ObjectStore,
    object: &ObjectPath,
    name: &Path,
    path: &Path,
) -> Result<(u64, String)> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut hash = Sha256::new();
    let mut sent = 0u64;
    if size <= SINGLE_PUT {
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        hash.update(&bytes);
        sent = bytes.len() as u64;
        rt.block_on(store.put(object, PutPayload::from(bytes)))
            .map_err(|e| store_error(name, &e))?;
    } else {
        let upload = rt
            .block_on(store.put_multipart(object))
            .map_err(|e| store_error(name, &e))?;
        // WriteMultipart spawns each part's upload on the current runtime.
        let _in_runtime = rt.enter();
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buf = vec![0u8; PART_SIZE];
        loop {
            let n = match file.read(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    let _ = rt.block_on(w.abort());
                    return Err(Error::io(path, e));
                }
            };
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            sent += n as u64;
            if let Err(e) = rt.block_on(w.wait_for_capacity(PARTS_IN_FLIGHT)) {
                let _ = rt.block_on(w.abort());
                return Err(store_error(name, &e));
            }
            w.write(&buf[..n]);
        }
        rt.block_on(w.finish()).map_err(|e| store_error(name, &e))?;
    }
    if sent != size {
        return Err(Error::input(
            path,
            "",
            format!(
                "changed while uploaded ({size} bytes, then {sent}); expected a finished output"
            ),
        ));
    }
    Ok((size, hex::encode(hash.finalize())))
}
