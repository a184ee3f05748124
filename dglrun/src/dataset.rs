//! The partition layout on disk (`<workspace>/dataset/<graph>.json` and
//! `part<i>/`, as `dgl.distributed.partition_graph` writes it), its checks,
//! and the manifest (size + sha256 of every file) the partitioner serves.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use dgl_api::names::DATASET_DIR;
use dgl_api::wire::{part_dir_name, partition_json_name, FileEntry, Manifest};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What is wrong with a partition folder. Messages name the files.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("partition config {path} is missing (expected the output of the partition step at <workspace>/{DATASET_DIR}/<graph>.json)")]
    MissingJson { path: String },
    #[error("partition config {path} is not valid JSON: {message}")]
    BadJson { path: String, message: String },
    #[error("partition config {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("partition config {path} has num_parts={found}, but {expected} partitions were requested (one per worker)")]
    NumParts {
        path: String,
        found: u64,
        expected: u32,
    },
    #[error("partitions in {dir} are incomplete; missing: {}", missing.join("; "))]
    Missing { dir: String, missing: Vec<String> },
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// The partition folder of a graph.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<workspace>/dataset`
    pub dir: PathBuf,
    pub graph_name: String,
    /// GraphBolt partitions: each part's graph is its
    /// `part_graph_graphbolt` file; its DGLGraph (`part_graph`) is neither
    /// required nor shipped.
    pub graphbolt: bool,
}

/// The JSON key of a part's DGLGraph, and of its GraphBolt graph (written
/// by DGL 2.1.0's `dgl_partition_to_graphbolt`).
pub const PART_GRAPH: &str = "part_graph";
pub const PART_GRAPH_GRAPHBOLT: &str = "part_graph_graphbolt";

/// What a successful check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub num_parts: u32,
    /// Files referenced by the checked parts, relative to the dataset folder.
    pub referenced: Vec<String>,
}

impl Layout {
    pub fn new(workspace: &Path, graph_name: &str) -> Layout {
        Layout {
            dir: workspace.join(DATASET_DIR),
            graph_name: graph_name.to_string(),
            graphbolt: false,
        }
    }

    /// The same folder, read as GraphBolt partitions when `on`.
    pub fn with_graphbolt(mut self, on: bool) -> Layout {
        self.graphbolt = on;
        self
    }

    /// Whether every part of the JSON already names its GraphBolt graph
    /// (false also when the JSON cannot be read: the check says why).
    pub fn has_graphbolt_graphs(&self) -> bool {
        let Ok(json) = self.read_json() else {
            return false;
        };
        let n = json_num_parts(&json, &self.json_path()).unwrap_or(0);
        n > 0
            && (0..n).all(|i| {
                json.get(format!("part-{i}"))
                    .and_then(|e| e.get(PART_GRAPH_GRAPHBOLT))
                    .is_some()
            })
    }

    /// In GraphBolt mode, the DGLGraph files the JSON names (relative to the
    /// dataset folder): left out of the manifest and the shard's size.
    fn unshipped(&self) -> BTreeSet<String> {
        if !self.graphbolt {
            return BTreeSet::new();
        }
        let Ok(json) = self.read_json() else {
            return BTreeSet::new();
        };
        let Some(map) = json.as_object() else {
            return BTreeSet::new();
        };
        map.iter()
            .filter(|(k, _)| k.starts_with("part-"))
            .filter_map(|(_, e)| e.get(PART_GRAPH)?.as_str())
            .filter_map(|rel| self.resolve(rel).ok())
            .map(|(rel, _)| rel)
            .collect()
    }

    /// `<dir>/<graph>.json`
    pub fn json_path(&self) -> PathBuf {
        self.dir.join(partition_json_name(&self.graph_name))
    }

    /// `<dir>/part<i>`
    pub fn part_dir(&self, part: u32) -> PathBuf {
        self.dir.join(part_dir_name(part))
    }

    fn read_json(&self) -> Result<Value, LayoutError> {
        let path = self.json_path();
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LayoutError::MissingJson { path: shown })
            }
            Err(source) => {
                return Err(LayoutError::Io {
                    path: shown,
                    source,
                })
            }
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| LayoutError::BadJson {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        if !v.is_object() {
            return Err(LayoutError::Invalid {
                path: shown,
                message: "expected a JSON object".into(),
            });
        }
        if let Some(name) = v.get("graph_name").and_then(Value::as_str) {
            if name != self.graph_name {
                return Err(LayoutError::Invalid {
                    path: shown,
                    message: format!(
                        "graph_name is {name:?} but the job's graph name is {:?}",
                        self.graph_name
                    ),
                });
            }
        }
        Ok(v)
    }

    /// Checks the whole output of the partition step: the JSON exists,
    /// `num_parts` equals `expected`, and every file each `part-<i>` entry
    /// references exists. All missing things are reported at once.
    pub fn check_all(&self, expected: u32) -> Result<PartitionInfo, LayoutError> {
        let json = self.read_json()?;
        let found = json_num_parts(&json, &self.json_path())?;
        if found != u64::from(expected) {
            return Err(LayoutError::NumParts {
                path: self.json_path().display().to_string(),
                found,
                expected,
            });
        }
        self.check_parts(&json, found, 0..expected)
    }

    /// Checks what one worker needs: the JSON and the files of `part-<part>`.
    /// `expected_parts`, when given, must match the JSON's `num_parts`.
    pub fn check_shard(
        &self,
        part: u32,
        expected_parts: Option<u32>,
    ) -> Result<PartitionInfo, LayoutError> {
        let json = self.read_json()?;
        let found = json_num_parts(&json, &self.json_path())?;
        if let Some(expected) = expected_parts {
            if found != u64::from(expected) {
                return Err(LayoutError::NumParts {
                    path: self.json_path().display().to_string(),
                    found,
                    expected,
                });
            }
        }
        if u64::from(part) >= found {
            return Err(LayoutError::Invalid {
                path: self.json_path().display().to_string(),
                message: format!("has num_parts={found}, so there is no partition {part}"),
            });
        }
        self.check_parts(&json, found, part..part + 1)
    }

    fn check_parts(
        &self,
        json: &Value,
        num_parts: u64,
        parts: std::ops::Range<u32>,
    ) -> Result<PartitionInfo, LayoutError> {
        let json_name = partition_json_name(&self.graph_name);
        let mut missing = Vec::new();
        let mut referenced = BTreeSet::new();
        for i in parts {
            let key = format!("part-{i}");
            let Some(entry) = json.get(&key).and_then(Value::as_object) else {
                missing.push(format!("{json_name} has no \"{key}\" entry"));
                continue;
            };
            let dir = self.part_dir(i);
            if !dir.is_dir() {
                missing.push(format!("folder {} (partition {i})", dir.display()));
            }
            if self.graphbolt && !entry.contains_key(PART_GRAPH_GRAPHBOLT) {
                missing.push(format!("{json_name} {key}.{PART_GRAPH_GRAPHBOLT} (GraphBolt was asked for but partition {i} is in DGL's format: partition_graph(..., use_graphbolt=True) or dgl_partition_to_graphbolt makes it)"));
            }
            for (field, value) in entry {
                // GraphBolt's servers never load the DGLGraph.
                if self.graphbolt && field == PART_GRAPH {
                    continue;
                }
                // Values are paths (strings); anything else is not a file reference.
                let Some(rel) = value.as_str() else { continue };
                match self.resolve(rel) {
                    Ok((rel_norm, abs)) => {
                        if !abs.is_file() {
                            missing.push(format!(
                                "{} (referenced by {json_name} {key}.{field})",
                                abs.display()
                            ));
                        }
                        referenced.insert(rel_norm);
                    }
                    Err(message) => missing.push(format!("{key}.{field}: {message}")),
                }
            }
        }
        if !missing.is_empty() {
            return Err(LayoutError::Missing {
                dir: self.dir.display().to_string(),
                missing,
            });
        }
        Ok(PartitionInfo {
            num_parts: u32::try_from(num_parts).unwrap_or(u32::MAX),
            referenced: referenced.into_iter().collect(),
        })
    }

    /// Resolves a path from the partition JSON. DGL writes paths relative to
    /// the JSON's folder; an absolute path is accepted only inside that
    /// folder, because a worker gets the files in the same relative layout.
    fn resolve(&self, rel: &str) -> Result<(String, PathBuf), String> {
        let p = Path::new(rel);
        let relative = if p.is_absolute() {
            p.strip_prefix(&self.dir)
                .map_err(|_| {
                    format!(
                        "absolute path {rel} is outside the dataset folder {}",
                        self.dir.display()
                    )
                })?
                .to_path_buf()
        } else {
            p.to_path_buf()
        };
        let mut parts = Vec::new();
        for c in relative.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
                Component::CurDir => {}
                _ => return Err(format!("path {rel} leaves the dataset folder")),
            }
        }
        if parts.is_empty() {
            return Err(format!("empty path {rel:?}"));
        }
        let joined = parts.join("/");
        Ok((joined.clone(), self.dir.join(joined)))
    }

    /// Total size of the files below `part<i>/`: what the DGL servers load
    /// into shared memory.
    pub fn shard_bytes(&self, part: u32) -> io::Result<u64> {
        let skip = self.unshipped();
        let mut total = 0;
        for (rel, abs) in walk_files(&self.part_dir(part), &part_dir_name(part))? {
            if !skip.contains(&rel) {
                total += abs.metadata()?.len();
            }
        }
        Ok(total)
    }

    /// Builds the manifest: the JSON plus every file below `part<i>/` for
    /// every part. Reads and hashes every byte (blocking).
    pub fn build_manifest(&self, num_parts: u32) -> Result<Manifest, LayoutError> {
        self.manifest(num_parts, file_entry)
    }

    /// The same files as [`Self::build_manifest`] with their sizes only, at
    /// once: no byte is read, so serving starts as soon as the partitions
    /// are checked, whatever their size. The file server hashes chunk by
    /// chunk as it goes (`transfer::FileServer`).
    pub fn list_manifest(&self, num_parts: u32) -> Result<Manifest, LayoutError> {
        self.manifest(num_parts, |path, abs| {
            Ok(FileEntry {
                path,
                size: abs.metadata()?.len(),
                sha256: String::new(),
            })
        })
    }

    fn manifest(
        &self,
        num_parts: u32,
        file_entry: impl Fn(String, &Path) -> io::Result<FileEntry>,
    ) -> Result<Manifest, LayoutError> {
        let io_err = |path: &Path| {
            let path = path.display().to_string();
            move |source| LayoutError::Io { path, source }
        };
        let mut files = Vec::new();
        let json = self.json_path();
        files
            .push(file_entry(partition_json_name(&self.graph_name), &json).map_err(io_err(&json))?);
        let skip = self.unshipped();
        for i in 0..num_parts {
            let dir = self.part_dir(i);
            for (rel, abs) in walk_files(&dir, &part_dir_name(i)).map_err(io_err(&dir))? {
                if !skip.contains(&rel) {
                    files.push(file_entry(rel, &abs).map_err(io_err(&abs))?);
                }
            }
        }
        Ok(Manifest {
            graph_name: self.graph_name.clone(),
            num_parts,
            files,
        })
    }
}

fn json_num_parts(json: &Value, path: &Path) -> Result<u64, LayoutError> {
    json.get("num_parts")
        .and_then(Value::as_u64)
        .ok_or_else(|| LayoutError::Invalid {
            path: path.display().to_string(),
            message: "has no integer \"num_parts\"".into(),
        })
}

fn file_entry(rel: String, abs: &Path) -> io::Result<FileEntry> {
    let (size, sha256) = sha256_file(abs)?;
    Ok(FileEntry {
        path: rel,
        size,
        sha256,
    })
}

/// Regular files below `dir`, recursively, sorted, with their `/`-separated
/// path relative to the dataset folder (`prefix/...`).
fn walk_files(dir: &Path, prefix: &str) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), prefix.to_string())];
    while let Some((d, rel)) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ty = entry.file_type()?;
            let child_rel = format!("{rel}/{name}");
            if ty.is_dir() {
                stack.push((entry.path(), child_rel));
            } else if ty.is_file() && !is_partial_name(&name) {
                out.push((child_rel, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The suffix of an unfinished download (never served, never counted).
const PARTIAL_SUFFIX: &str = ".dglrun-partial";

/// Where a download of `target` is written until its sha256 matched.
pub fn partial_path(target: &Path) -> PathBuf {
    PathBuf::from(format!("{}{PARTIAL_SUFFIX}", target.display()))
}

/// Whether a file name is an unfinished download.
pub fn is_partial_name(name: &str) -> bool {
    name.ends_with(PARTIAL_SUFFIX)
}

/// Size and sha256 (lower-case hex) of a file.
pub fn sha256_file(path: &Path) -> io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, content: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn fake_partitions(ws: &Path, parts: u32) -> Layout {
        let l = Layout::new(ws, "g");
        let mut json = serde_json::json!({"graph_name": "g", "num_parts": parts});
        for i in 0..parts {
            json[format!("part-{i}")] = serde_json::json!({
                "node_feats": format!("part{i}/node_feat.dgl"),
                "edge_feats": format!("part{i}/edge_feat.dgl"),
                "part_graph": format!("part{i}/graph.dgl"),
            });
            for f in ["node_feat.dgl", "edge_feat.dgl", "graph.dgl"] {
                write(&l.part_dir(i).join(f), &format!("{i}{f}"));
            }
        }
        write(&l.json_path(), &json.to_string());
        l
    }

    #[test]
    fn complete_output_passes_and_builds_a_manifest() {
        let ws = tempfile::tempdir().unwrap();
        let l = fake_partitions(ws.path(), 2);
        let info = l.check_all(2).unwrap();
        assert_eq!(info.referenced.len(), 6);
        let m = l.build_manifest(2).unwrap();
        assert_eq!(m.files.len(), 7);
        assert_eq!(m.files[0].path, "g.json");
        assert_eq!(m.shard_files(1).len(), 4);
        let e = m.get("part0/graph.dgl").unwrap();
        assert_eq!(e.size, "0graph.dgl".len() as u64);
        assert_eq!(e.sha256, hex::encode(Sha256::digest(b"0graph.dgl")));
        assert_eq!(l.shard_bytes(1).unwrap(), 14 + 14 + 10);
    }

    #[test]
    fn wrong_num_parts_and_missing_files_are_named() {
        let ws = tempfile::tempdir().unwrap();
        let l = fake_partitions(ws.path(), 2);
        let e = l.check_all(3).unwrap_err().to_string();
        assert!(
            e.contains("num_parts=2") && e.contains("3 partitions"),
            "{e}"
        );
        std::fs::remove_file(l.part_dir(1).join("node_feat.dgl")).unwrap();
        let e = l.check_all(2).unwrap_err().to_string();
        assert!(e.contains("part1/node_feat.dgl"), "{e}");
        assert!(e.contains("part-1.node_feats"), "{e}");
        // Worker 0 is still complete.
        l.check_shard(0, Some(2)).unwrap();
        let e = l.check_shard(1, Some(2)).unwrap_err().to_string();
        assert!(e.contains("part1/node_feat.dgl"), "{e}");
        std::fs::remove_file(l.json_path()).unwrap();
        let e = l.check_shard(0, None).unwrap_err().to_string();
        assert!(e.contains("g.json") && e.contains("missing"), "{e}");
    }

    /// GraphBolt: the check wants part_graph_graphbolt, and graph.dgl is
    /// neither required on a worker nor shipped.
    #[test]
    fn graphbolt_partitions_ship_the_fused_csc_graph_only() {
        let ws = tempfile::tempdir().unwrap();
        let l = fake_partitions(ws.path(), 2).with_graphbolt(true);
        assert!(!l.has_graphbolt_graphs());
        let e = l.check_all(2).unwrap_err().to_string();
        assert!(e.contains("part-1.part_graph_graphbolt"), "{e}");
        let mut json: Value =
            serde_json::from_str(&std::fs::read_to_string(l.json_path()).unwrap()).unwrap();
        for i in 0..2 {
            let f = format!("part{i}/fused_csc_sampling_graph.pt");
            json[format!("part-{i}")][PART_GRAPH_GRAPHBOLT] = f.clone().into();
            write(&l.dir.join(&f), "fused");
        }
        write(&l.json_path(), &json.to_string());
        assert!(l.has_graphbolt_graphs());
        l.check_all(2).unwrap();
        let m = l.build_manifest(2).unwrap();
        assert!(m.get("part0/fused_csc_sampling_graph.pt").is_some());
        assert!(m.get("part0/graph.dgl").is_none(), "{:?}", m.files);
        assert_eq!(l.shard_bytes(1).unwrap(), 14 + 14 + 5);
        // A worker without graph.dgl is complete for GraphBolt, not for DGL.
        std::fs::remove_file(l.part_dir(1).join("graph.dgl")).unwrap();
        l.check_shard(1, Some(2)).unwrap();
        let plain = Layout::new(ws.path(), "g");
        assert!(plain.check_shard(1, Some(2)).is_err());
    }

    #[test]
    fn paths_leaving_the_folder_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        let l = fake_partitions(ws.path(), 1);
        let mut json: Value =
            serde_json::from_str(&std::fs::read_to_string(l.json_path()).unwrap()).unwrap();
        json["part-0"]["node_feats"] = "../../etc/passwd".into();
        write(&l.json_path(), &json.to_string());
        let e = l.check_all(1).unwrap_err().to_string();
        assert!(e.contains("leaves the dataset folder"), "{e}");
    }
}
