//! A partition assignment in DGL's own format (what `tools/partition_algo`
//! writes and `tools/dispatch_data.py` reads): one `<ntype>.txt` per node
//! type, line `i` the partition of per-type node `i`, and
//! `partition_meta.json` = `{"algo_name", "num_parts", "version": "1.0.0"}`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{Assignment, Partitioner, Request};
use crate::model::InputGraph;
use crate::names::{self, Name};
use crate::{Error, Result};

pub const META_FILE: &str = "partition_meta.json";
const VERSION: &str = "1.0.0";

/// The partitioner that reads a user's assignment from `dir`.
#[derive(Clone, Debug)]
pub struct FromFiles {
    pub dir: PathBuf,
}

impl FromFiles {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FromFiles { dir: dir.into() }
    }
}

impl Partitioner for FromFiles {
    fn assign(&self, req: &Request<'_>) -> Result<Assignment> {
        read_files(&self.dir, req.graph, Some(req.num_parts))
    }
}

/// Reads the assignment in `dir` for `graph`. With `num_parts`, the file's
/// `num_parts` must agree with it.
pub fn read_files(dir: &Path, graph: &InputGraph, num_parts: Option<u32>) -> Result<Assignment> {
    let files = file_names(graph)?;
    let (k, algo_name) = read_meta(&dir.join(META_FILE), num_parts)?;
    let mut parts = Vec::with_capacity(graph.num_nodes() as usize);
    for (t, file) in graph.ntypes.iter().zip(files) {
        let path = dir.join(file);
        let bytes = std::fs::read(&path).map_err(|e| missing(&path, e))?;
        parse_parts(&path, &bytes, t.count, k, &mut parts)?;
    }
    Ok(Assignment {
        num_parts: k,
        parts,
        algo_name,
    })
}

/// `<ntype>.txt` per node type, every name checked before any file is
/// opened: a type name is never a path out of the folder.
fn file_names(graph: &InputGraph) -> Result<Vec<String>> {
    let names = graph.ntypes.iter().enumerate().map(|(i, t)| {
        Name::parse(&t.name)
            .map(|n| n.file("txt"))
            .map_err(|e| names::config_error(&format!("node type {i}"), e))
    });
    names.collect()
}

fn missing(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::input(path, "", "missing: the assignment needs this file")
    } else {
        Error::io(path, e)
    }
}

fn read_meta(path: &Path, want: Option<u32>) -> Result<(u32, String)> {
    let text = std::fs::read_to_string(path).map_err(|e| missing(path, e))?;
    let meta: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::input(path, format!("line {}", e.line()), e.to_string()))?;
    let version = meta.get("version").and_then(|v| v.as_str());
    if version.is_some_and(|v| v != VERSION) {
        let msg = format!("version {version:?} is not supported, expected \"{VERSION}\"");
        return Err(Error::input(path, "version", msg));
    }
    let k = meta
        .get("num_parts")
        .and_then(|v| v.as_u64())
        .filter(|&k| k >= 1 && k <= u64::from(u32::MAX))
        .ok_or_else(|| Error::input(path, "num_parts", "expected a positive integer"))?
        as u32;
    if let Some(w) = want.filter(|&w| w != k) {
        let msg = format!("the assignment has {k} partitions, {w} were requested");
        return Err(Error::input(path, "num_parts", msg));
    }
    let algo = meta
        .get("algo_name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::input(path, "algo_name", "expected a string"))?;
    Ok((k, algo.to_string()))
}

/// Appends the `count` part ids of one file to `out`.
fn parse_parts(path: &Path, bytes: &[u8], count: u64, k: u32, out: &mut Vec<u32>) -> Result<()> {
    let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut lines = 0u64;
    if !text.is_empty() {
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let at = || format!("line {}", i + 1);
            if lines == count {
                let msg = format!("too many lines: expected {count}, one per node");
                return Err(Error::input(path, at(), msg));
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let p = parse_part(line, k).map_err(|m| Error::input(path, at(), m))?;
            out.push(p);
            lines += 1;
        }
    }
    if lines < count {
        let msg = format!("too few lines: {lines}, expected {count}, one per node");
        return Err(Error::input(path, format!("line {}", lines + 1), msg));
    }
    Ok(())
}

fn parse_part(line: &[u8], k: u32) -> std::result::Result<u32, String> {
    let s = std::str::from_utf8(line).unwrap_or("").trim();
    let p: u64 = s
        .parse()
        .map_err(|_| format!("expected a partition id (an integer in 0..{k}), found {s:?}"))?;
    if p >= u64::from(k) {
        return Err(format!("partition {p} is not below num_parts {k}"));
    }
    Ok(p as u32)
}

/// Writes `a` for `graph` into `dir` in DGL's format (DGL's `base.py`
/// writes the metadata with sorted keys and an indent of 4).
pub fn write_files(a: &Assignment, graph: &InputGraph, dir: &Path) -> Result<()> {
    let files = file_names(graph)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let offs = graph.node_offsets();
    for (i, file) in files.iter().enumerate() {
        let path = dir.join(file);
        let slice = &a.parts[offs[i] as usize..offs[i + 1] as usize];
        write_parts(&path, slice)?;
    }
    let meta: BTreeMap<&str, serde_json::Value> = BTreeMap::from([
        ("algo_name", a.algo_name.clone().into()),
        ("num_parts", a.num_parts.into()),
        ("version", VERSION.into()),
    ]);
    let path = dir.join(META_FILE);
    let text = serde_json::to_string_pretty(&meta).map_err(|e| Error::Stage {
        stage: "assignment",
        message: e.to_string(),
    })?;
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
}

fn write_parts(path: &Path, parts: &[u32]) -> Result<()> {
    // Formatted in parallel blocks, written in order.
    let blocks: Vec<Vec<u8>> = parts
        .par_chunks(1 << 20)
        .map(|c| {
            let mut b = Vec::with_capacity(c.len() * 3);
            for p in c {
                // Writing into a Vec cannot fail.
                let _ = writeln!(b, "{p}");
            }
            b
        })
        .collect();
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    for b in blocks {
        w.write_all(&b).map_err(|e| Error::io(path, e))?;
    }
    w.flush().map_err(|e| Error::io(path, e))
}
