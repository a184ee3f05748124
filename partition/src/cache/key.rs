//! The cache key: a hex SHA-256 digest of what decides the partitions.
//!
//! Format `dgl-partition-cache-key/1` (the first field of the digest: a
//! new format makes new keys). The digest is over a sequence of fields,
//! each `u64 LE name length, name, u64 LE value length, value`, in this
//! order:
//!
//! 1. `format`: the format string above;
//! 2. `partitioner`: this crate's version (a new partitioner may write
//!    other partitions; a new release keys anew);
//! 3. the input: for chunked input `metadata.json` (its bytes), then per
//!    file it lists, in its order (edges by type, node data, edge data):
//!    `chunk` = its size and, for an object, `etag:<ETag>` (one HEAD each,
//!    through the input's store), for a local file `sha256:<digest>` of its
//!    content (no mtime: a copy keys alike). Text input: each of its files
//!    (nodes, edges, removed edges, schema) so, and its parsing settings;
//! 4. the settings that change the output ([`KeySettings`]): the driver
//!    ([`Mode`]), the partitioner (`file`: each assignment file's name,
//!    size and SHA-256), `num_parts`, the balance constraints, the seed,
//!    the graph name (it names the files), GraphBolt on or off;
//! 5. `workers`: the worker count.
//!
//! An object replaced between the key's HEAD and the partitioner's read
//! would be partitioned under the old key: the caller that wires this in
//! must key from the ETags the read used (or check them after) to close
//! that window; this module does not yet.
//!
//! Left out on purpose: the thread count (the pipeline's output does not
//! depend on it), `--allow-input-outside` (it permits files, it does not
//! change them), where the input lives (the same files elsewhere are the
//! same graph).

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::config::{AllParts, Config, OwnPart};
use crate::input::{metadata, store, Source};
use crate::settings::Choice;
use crate::{Error, Result};

/// The key format (the digest's first field).
pub const KEY_FORMAT: &str = "dgl-partition-cache-key/1";

/// A cache key: 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// A key as printed by [`Key`]'s `Display` (e.g. from a status field).
    pub fn from_hex(s: &str) -> Result<Key> {
        if s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Key(s.to_string()))
        } else {
            Err(Error::Config(format!(
                "partition cache key {:?}: expected 64 lowercase hex digits",
                s.chars().take(80).collect::<String>()
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which driver makes the partitions (their assignments differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One process, partition mode ParMETIS ([`crate::run`]).
    ParMetis,
    /// One rank per worker, partition mode DistParMETIS ([`crate::rank`]).
    DistParMetis { gather_structure: bool },
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::ParMetis => "ParMETIS",
            Mode::DistParMetis {
                gather_structure: false,
            } => "DistParMETIS",
            Mode::DistParMetis {
                gather_structure: true,
            } => "DistParMETIS gather-structure",
        }
    }
}

/// The settings that change the partitions, and the worker count.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySettings {
    pub mode: Mode,
    pub partitioner: Choice,
    pub num_parts: u32,
    pub balance_train: Option<String>,
    pub balance_edges: bool,
    pub seed: u64,
    pub graph_name: String,
    /// GraphBolt partitions (`fused_csc_sampling_graph.pt`) are made.
    pub graphbolt: bool,
    pub workers: u32,
}

impl KeySettings {
    /// The settings of a one-process run (partition mode ParMETIS).
    pub fn of_run(cfg: &Config<AllParts>, workers: u32, graphbolt: bool) -> KeySettings {
        KeySettings::of(
            cfg,
            Mode::ParMetis,
            cfg.driver.num_parts,
            workers,
            graphbolt,
        )
    }

    /// The settings of `workers` ranks (partition mode DistParMETIS: one
    /// part per rank).
    pub fn of_ranks(cfg: &Config<OwnPart>, workers: u32, graphbolt: bool) -> KeySettings {
        let mode = Mode::DistParMetis {
            gather_structure: cfg.driver.gather_structure,
        };
        KeySettings::of(cfg, mode, workers, workers, graphbolt)
    }

    fn of<D>(cfg: &Config<D>, mode: Mode, parts: u32, workers: u32, gb: bool) -> KeySettings {
        KeySettings {
            mode,
            partitioner: cfg.partitioner.clone(),
            num_parts: parts,
            balance_train: cfg.balance_train.clone(),
            balance_edges: cfg.balance_edges,
            seed: cfg.seed,
            graph_name: cfg.graph_name.clone(),
            graphbolt: gb,
            workers,
        }
    }
}

/// The digest being built, one field at a time.
struct Fields(Sha256);

impl Fields {
    fn add(&mut self, name: &str, value: &[u8]) {
        self.0.update((name.len() as u64).to_le_bytes());
        self.0.update(name.as_bytes());
        self.0.update((value.len() as u64).to_le_bytes());
        self.0.update(value);
    }
}

/// The key of partitioning `source` with `settings` (reads metadata.json
/// and takes each listed file's identity: see the module's documentation).
pub fn key(source: &Source, settings: &KeySettings) -> Result<Key> {
    let mut f = Fields(Sha256::new());
    f.add("format", KEY_FORMAT.as_bytes());
    f.add("partitioner", env!("CARGO_PKG_VERSION").as_bytes());
    add_input(&mut f, source)?;
    add_settings(&mut f, settings)?;
    f.add("workers", &settings.workers.to_le_bytes());
    Ok(Key(hex::encode(f.0.finalize())))
}

fn add_input(f: &mut Fields, source: &Source) -> Result<()> {
    match source {
        Source::Chunked { metadata } => add_chunked(f, metadata, false),
        Source::ChunkedAnywhere { metadata } => add_chunked(f, metadata, true),
        Source::Text(t) => {
            f.add("input", b"text");
            add_file(f, "nodes", &t.nodes)?;
            add_file(f, "edges", &t.edges)?;
            if let Some(p) = &t.removed_edges {
                add_file(f, "removed_edges", p)?;
            }
            if let Some(p) = &t.schema {
                add_file(f, "schema", p)?;
            }
            f.add(
                "num_node_weights",
                &(t.num_node_weights as u64).to_le_bytes(),
            );
            f.add(
                "node_attr_dtype",
                format!("{:?}", t.node_attr_dtype).as_bytes(),
            );
            f.add(
                "edge_attr_dtype",
                format!("{:?}", t.edge_attr_dtype).as_bytes(),
            );
            Ok(())
        }
    }
}

fn add_chunked(f: &mut Fields, path: &Path, anywhere: bool) -> Result<()> {
    f.add("input", b"chunked");
    let bytes = store::read(path).map_err(|e| Error::io(path, e))?;
    f.add("metadata.json", &bytes);
    let meta = metadata::load(path, anywhere)?;
    let data = meta.node_data.iter().chain(&meta.edge_data).flatten();
    let files = meta
        .etypes
        .iter()
        .flat_map(|e| &e.files)
        .chain(data.flat_map(|d| &d.files));
    for file in files {
        add_file(f, "chunk", file)?;
    }
    Ok(())
}

/// A file's size and identity: an object's ETag, a local file's SHA-256.
fn add_file(f: &mut Fields, name: &str, path: &Path) -> Result<()> {
    let (size, id) = if store::is_object(path) {
        let (size, etag) = store::size_and_etag(path).map_err(|e| Error::io(path, e))?;
        let etag = etag.ok_or_else(|| {
            Error::input(
                path,
                "",
                "the server gave no ETag: the partition cache cannot tell this object's \
                 version (expected an S3 server that answers HEAD with an ETag)",
            )
        })?;
        (size, format!("etag:{etag}"))
    } else {
        let (size, digest) = file_sha256(path)?;
        (size, format!("sha256:{digest}"))
    };
    let mut value = size.to_le_bytes().to_vec();
    value.extend_from_slice(id.as_bytes());
    f.add(name, &value);
    Ok(())
}

/// A local file's size and SHA-256, read in pieces.
pub(crate) fn file_sha256(path: &Path) -> Result<(u64, String)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(h.finalize())))
}

fn add_settings(f: &mut Fields, s: &KeySettings) -> Result<()> {
    f.add("mode", s.mode.as_str().as_bytes());
    f.add("part_method", s.partitioner.as_str().as_bytes());
    if let Choice::File(dir) = &s.partitioner {
        for path in assignment_files(dir)? {
            let name = path.file_name().map(|n| n.as_encoded_bytes().to_vec());
            f.add("assignment_file", &name.unwrap_or_default());
            add_file(f, "assignment", &path)?;
        }
    }
    f.add("num_parts", &s.num_parts.to_le_bytes());
    match &s.balance_train {
        Some(feat) => f.add("balance_train", feat.as_bytes()),
        None => f.add("balance_train", b"\0none"),
    }
    f.add("balance_edges", &[u8::from(s.balance_edges)]);
    f.add("seed", &s.seed.to_le_bytes());
    f.add("graph_name", s.graph_name.as_bytes());
    f.add("graphbolt", &[u8::from(s.graphbolt)]);
    Ok(())
}

/// The files directly in an assignment folder, by name.
fn assignment_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{write_chunked, EdgeFormat};

    fn settings() -> KeySettings {
        KeySettings {
            mode: Mode::ParMetis,
            partitioner: Choice::Metis,
            num_parts: 3,
            balance_train: None,
            balance_edges: false,
            seed: 7,
            graph_name: "g".into(),
            graphbolt: false,
            workers: 3,
        }
    }

    fn graph(dir: &Path) -> Source {
        let g = crate::rmat::bidirected_graph(200, 800, 2, 1);
        let metadata = write_chunked(&g, dir, 2, EdgeFormat::Parquet).unwrap();
        Source::Chunked { metadata }
    }

    #[test]
    fn the_same_input_and_settings_give_the_same_key() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (sa, sb) = (graph(a.path()), graph(b.path()));
        let k = key(&sa, &settings()).unwrap();
        assert_eq!(k.as_str().len(), 64);
        assert_eq!(Key::from_hex(k.as_str()).unwrap(), k);
        assert_eq!(key(&sa, &settings()).unwrap(), k, "deterministic");
        // The same files in another folder are the same graph.
        assert_eq!(key(&sb, &settings()).unwrap(), k, "a copy keys alike");
        let anywhere = match &sa {
            Source::Chunked { metadata } => Source::ChunkedAnywhere {
                metadata: metadata.clone(),
            },
            _ => unreachable!(),
        };
        assert_eq!(key(&anywhere, &settings()).unwrap(), k);
    }

    #[test]
    fn any_one_setting_changed_gives_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let src = graph(dir.path());
        let base = key(&src, &settings()).unwrap();
        let assign = tempfile::tempdir().unwrap();
        std::fs::write(assign.path().join("_N.txt"), "0\n1\n").unwrap();
        type Change = fn(&mut KeySettings);
        let changes: [(&str, Change); 11] = [
            ("mode", |s| {
                s.mode = Mode::DistParMetis {
                    gather_structure: false,
                }
            }),
            ("gather", |s| {
                s.mode = Mode::DistParMetis {
                    gather_structure: true,
                }
            }),
            ("method", |s| s.partitioner = Choice::Random),
            ("parts", |s| s.num_parts = 4),
            ("balance_train", |s| {
                s.balance_train = Some("train_mask".into())
            }),
            ("balance_train empty", |s| {
                s.balance_train = Some(String::new())
            }),
            ("balance_edges", |s| s.balance_edges = true),
            ("seed", |s| s.seed = 8),
            ("graph_name", |s| s.graph_name = "h".into()),
            ("graphbolt", |s| s.graphbolt = true),
            ("workers", |s| s.workers = 2),
        ];
        let mut seen = std::collections::HashSet::from([base.clone()]);
        for (what, change) in changes {
            let mut s = settings();
            change(&mut s);
            let k = key(&src, &s).unwrap();
            assert!(seen.insert(k), "{what}: a new key");
        }
        // The drivers' settings from their configs.
        let cfg = crate::settings::PartitionArgs {
            input: None,
            allow_input_outside: false,
            part_method: Choice::Metis,
            assignment_dir: None,
            threads: Some(2),
            seed: 7,
        }
        .config(src.clone(), "/out".into(), "g", AllParts { num_parts: 3 });
        assert_eq!(KeySettings::of_run(&cfg, 3, false), settings());
        let ranks = Config {
            driver: OwnPart::default(),
            source: cfg.source.clone(),
            out_dir: cfg.out_dir.clone(),
            graph_name: cfg.graph_name.clone(),
            partitioner: cfg.partitioner.clone(),
            balance_train: None,
            balance_edges: false,
            threads: 2,
            seed: 7,
        };
        let r = KeySettings::of_ranks(&ranks, 4, true);
        assert_eq!((r.num_parts, r.workers, r.graphbolt), (4, 4, true));
        assert_eq!(
            r.mode,
            Mode::DistParMetis {
                gather_structure: false
            }
        );
        // An assignment folder's content is part of the key.
        let mut s = settings();
        s.partitioner = Choice::File(assign.path().to_path_buf());
        let file1 = key(&src, &s).unwrap();
        std::fs::write(assign.path().join("_N.txt"), "1\n0\n").unwrap();
        let file2 = key(&src, &s).unwrap();
        assert!(seen.insert(file1) && seen.insert(file2), "assignment files");
    }

    #[test]
    fn any_input_file_changed_gives_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let src = graph(dir.path());
        let base = key(&src, &settings()).unwrap();
        let Source::Chunked { metadata } = &src else {
            unreachable!()
        };
        let meta = metadata::load(metadata, false).unwrap();
        let chunk = meta.etypes[0].files[1].clone();
        let feat = meta.node_data[0][0].files[0].clone();
        // One byte of a chunk, same size: its digest changes the key.
        for file in [chunk, feat] {
            let before = std::fs::read(&file).unwrap();
            let mut bytes = before.clone();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            std::fs::write(&file, &bytes).unwrap();
            assert_ne!(key(&src, &settings()).unwrap(), base, "{}", file.display());
            std::fs::write(&file, &before).unwrap();
            assert_eq!(key(&src, &settings()).unwrap(), base);
        }
        // metadata.json's bytes (a space: the same graph, another key).
        let text = std::fs::read_to_string(metadata).unwrap();
        std::fs::write(metadata, format!("{text} ")).unwrap();
        assert_ne!(key(&src, &settings()).unwrap(), base, "metadata.json");
        // A missing chunk is an error naming it.
        std::fs::write(metadata, text).unwrap();
        std::fs::remove_file(&meta.etypes[0].files[0]).unwrap();
        let e = key(&src, &settings()).unwrap_err().to_string();
        assert!(
            e.contains(&meta.etypes[0].files[0].display().to_string()),
            "{e}"
        );
    }
}
