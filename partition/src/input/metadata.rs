//! `metadata.json` of DGL's chunked graph format, checked and typed. Every
//! error names metadata.json and the key.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::limits::{self, kind, quoted, safe};
use super::store;
use crate::{Error, Result};

/// How a data file is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileFormat {
    Csv { delimiter: u8 },
    Parquet,
    Numpy,
}

/// One edge type's entry.
#[derive(Clone, Debug)]
pub(crate) struct EdgeMeta {
    /// `src:rel:dst`, as in the metadata.
    pub name: String,
    pub src: usize,
    pub rel: String,
    pub dst: usize,
    pub format: FileFormat,
    pub files: Vec<PathBuf>,
    /// `num_edges_per_chunk[e]`, when given.
    pub chunks: Option<Vec<u64>>,
    pub count: u64,
}

/// One feature (`node_data[ntype][name]` or `edge_data[etype][name]`).
#[derive(Clone, Debug)]
pub(crate) struct DataMeta {
    pub name: String,
    /// The JSON key, for messages: `node_data.paper.feat`.
    pub key: String,
    pub format: FileFormat,
    pub files: Vec<PathBuf>,
}

impl DataMeta {
    /// The error of a feature that lists no file.
    pub(crate) fn no_files(&self, meta: &Metadata) -> Error {
        Error::input(
            &meta.path,
            format!("{}.data", self.key),
            "expected at least one file",
        )
    }

    /// Checks that its files' rows (`rows_each`, one count per file) add
    /// up to `count`, the rows of `what` (one per node or edge).
    pub(crate) fn check_rows(
        &self,
        meta: &Metadata,
        what: &str,
        count: u64,
        rows_each: &[u64],
    ) -> Result<()> {
        let total = limits::sum(rows_each);
        if total == Some(count) {
            return Ok(());
        }
        let total = total.map_or("more than 2^64".into(), |t| t.to_string());
        let m = format!(
            "its {} files hold {total} rows, but {what} has {count}; expected one row each",
            self.files.len()
        );
        Err(Error::input(&meta.path, self.key.clone(), m))
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Metadata {
    pub path: PathBuf,
    pub graph_name: String,
    pub ntypes: Vec<String>,
    pub node_counts: Vec<u64>,
    /// `num_nodes_per_chunk[t]`, when given.
    pub node_chunks: Vec<Option<Vec<u64>>>,
    pub etypes: Vec<EdgeMeta>,
    pub node_data: Vec<Vec<DataMeta>>,
    pub edge_data: Vec<Vec<DataMeta>>,
}

/// Reads and checks `path`; unless `anywhere`, every file it lists must
/// be in its folder.
pub(crate) fn load(path: &Path, anywhere: bool) -> Result<Metadata> {
    let text = store::read(path).map_err(|e| Error::io(path, e))?;
    let root: Value = serde_json::from_slice(&text).map_err(|e| json_error(path, &e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // An object's listed files are checked by key (`store::place`).
    let confined = if anywhere || store::is_object(path) {
        None
    } else {
        Some(dir.canonicalize().map_err(|e| Error::io(dir, e))?)
    };
    let j = Json {
        path,
        dir,
        confined,
        anywhere,
    };
    let root = j.object(&root, "the top level")?;
    let ntypes = j.names(j.key(root, "node_type")?, "node_type")?;
    let ncounts = j.counts(root, &ntypes, "num_nodes_per_chunk", "num_nodes_per_type")?;
    let enames = j.strings(j.key(root, "edge_type")?, "edge_type")?;
    let ecounts = j.counts(root, &enames, "num_edges_per_chunk", "num_edges_per_type")?;
    let edges = j.object(j.key(root, "edges")?, "edges")?;
    let mut etypes = Vec::with_capacity(enames.len());
    for (e, (name, (chunks, count))) in enames.iter().zip(ecounts).enumerate() {
        etypes.push(j.edge_type(edges, name, &ntypes, chunks, count, e)?);
    }
    if let Some(extra) = edges.keys().find(|k| !enames.contains(k)) {
        return Err(j.err(
            format!("edges.{}", safe(extra)),
            "an edge type that edge_type does not list",
        ));
    }
    let node_data = j.data(root, "node_data", &ntypes, |k| {
        ntypes.iter().position(|t| t == k)
    })?;
    let edge_data = j.data(root, "edge_data", &enames, |k| edge_index(&etypes, k))?;
    let graph_name = match root.get("graph_name") {
        Some(v) => j.name(v, "graph_name", true)?,
        None => String::new(),
    };
    Ok(Metadata {
        path: path.to_path_buf(),
        graph_name,
        ntypes,
        node_counts: ncounts.iter().map(|c| c.1).collect(),
        node_chunks: ncounts.into_iter().map(|c| c.0).collect(),
        etypes,
        node_data,
        edge_data,
    })
}

/// A JSON syntax error by line and column, without the text around it.
pub(crate) fn json_error(path: &Path, e: &serde_json::Error) -> Error {
    Error::input(
        path,
        format!("line {}", e.line()),
        format!(
            "not valid JSON ({:?} error at column {}); expected one JSON object",
            e.classify(),
            e.column()
        ),
    )
}

/// An edge type by its canonical name, or by relation name when unique (as
/// DGL accepts non-canonical keys in `edge_data`).
fn edge_index(etypes: &[EdgeMeta], key: &str) -> Option<usize> {
    if let Some(e) = etypes.iter().position(|t| t.name == key) {
        return Some(e);
    }
    let mut by_rel = etypes.iter().enumerate().filter(|(_, t)| t.rel == key);
    match (by_rel.next(), by_rel.next()) {
        (Some((e, _)), None) => Some(e),
        _ => None,
    }
}

/// Typed access to the JSON with messages naming metadata.json and keys.
struct Json<'a> {
    path: &'a Path,
    dir: &'a Path,
    /// The folder every listed file must be in (canonical), unless the
    /// input may be anywhere.
    confined: Option<PathBuf>,
    anywhere: bool,
}

impl<'a> Json<'a> {
    fn err(&self, key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::input(self.path, key, message)
    }

    fn key<'v>(&self, obj: &'v Map<String, Value>, key: &str) -> Result<&'v Value> {
        obj.get(key)
            .ok_or_else(|| self.err(key, format!("missing key {key:?}")))
    }

    fn object<'v>(&self, v: &'v Value, key: &str) -> Result<&'v Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.err(key, format!("expected a JSON object, found {}", kind(v))))
    }

    fn array<'v>(&self, v: &'v Value, key: &str) -> Result<&'v Vec<Value>> {
        v.as_array()
            .ok_or_else(|| self.err(key, format!("expected a JSON array, found {}", kind(v))))
    }

    fn string<'v>(&self, v: &'v Value, key: &str) -> Result<&'v str> {
        v.as_str()
            .ok_or_else(|| self.err(key, format!("expected a string, found {}", kind(v))))
    }

    fn count(&self, v: &Value, key: &str) -> Result<u64> {
        v.as_u64().ok_or_else(|| {
            self.err(
                key,
                format!("expected a non-negative integer, found {}", kind(v)),
            )
        })
    }

    /// A type, feature or graph name: it may become a file name, so it
    /// must be one path component (`crate::names`); `""` only if `empty`.
    fn name(&self, v: &Value, key: &str, empty: bool) -> Result<String> {
        let s = self.string(v, key)?;
        match crate::names::check(s) {
            Err(crate::names::NameError::Empty) if empty => Ok(String::new()),
            Err(e) => Err(self.err(key, format!("found {e}; {}", crate::names::EXPECTED))),
            Ok(()) => Ok(s.to_string()),
        }
    }

    fn names(&self, v: &Value, key: &str) -> Result<Vec<String>> {
        let items = self.array(v, key)?.iter().enumerate();
        items
            .map(|(i, s)| self.name(s, &format!("{key}[{i}]"), false))
            .collect()
    }

    fn strings(&self, v: &Value, key: &str) -> Result<Vec<String>> {
        let items = self.array(v, key)?.iter().enumerate();
        items
            .map(|(i, s)| Ok(self.string(s, &format!("{key}[{i}]"))?.to_string()))
            .collect()
    }

    /// Per type: the chunk sizes (when `per_chunk` is given) and the count,
    /// from either key; when both are given they must agree.
    fn counts(
        &self,
        root: &Map<String, Value>,
        types: &[String],
        per_chunk: &str,
        per_type: &str,
    ) -> Result<Vec<(Option<Vec<u64>>, u64)>> {
        let chunks = match root.get(per_chunk) {
            Some(v) => Some(self.per_type_list(v, types, per_chunk, |v, k| {
                let sizes = self.array(v, k)?.iter().enumerate();
                sizes
                    .map(|(c, n)| self.count(n, &format!("{k}[{c}]")))
                    .collect()
            })?),
            None => None,
        };
        let totals = match root.get(per_type) {
            Some(v) => Some(self.per_type_list(v, types, per_type, |v, k| self.count(v, k))?),
            None => None,
        };
        let n = types.len();
        match (chunks, totals) {
            (None, None) => Err(self.err(
                per_chunk,
                format!("missing: expected {per_chunk} or {per_type} (one entry per type)"),
            )),
            (Some(c), None) => c
                .into_iter()
                .enumerate()
                .map(|(i, c): (usize, Vec<u64>)| {
                    let sum = self.chunk_sum(&c, per_chunk, i)?;
                    Ok((Some(c), sum))
                })
                .collect(),
            (None, Some(t)) => Ok(t.into_iter().map(|t| (None, t)).collect()),
            (Some(c), Some(t)) => (0..n)
                .map(|i| {
                    let sum = self.chunk_sum(&c[i], per_chunk, i)?;
                    if sum != t[i] {
                        return Err(self.err(
                            format!("{per_type}[{i}]"),
                            format!(
                                "{} has {} by {per_type} but {sum} by {per_chunk}; they must agree",
                                quoted(&types[i]),
                                t[i]
                            ),
                        ));
                    }
                    Ok((Some(c[i].clone()), t[i]))
                })
                .collect(),
        }
    }

    /// The sum of type `i`'s chunk sizes; more than 64 bits is an error.
    fn chunk_sum(&self, chunks: &[u64], key: &str, i: usize) -> Result<u64> {
        limits::sum(chunks).ok_or_else(|| {
            self.err(
                format!("{key}[{i}]"),
                "the chunk sizes add up to more than 2^64; expected a count that fits 64 bits",
            )
        })
    }

    fn per_type_list<T>(
        &self,
        v: &Value,
        types: &[String],
        key: &str,
        item: impl Fn(&Value, &str) -> Result<T>,
    ) -> Result<Vec<T>> {
        let list = self.array(v, key)?;
        if list.len() != types.len() {
            return Err(self.err(
                key,
                format!(
                    "expected {} entries (one per type), found {}",
                    types.len(),
                    list.len()
                ),
            ));
        }
        let items = list.iter().enumerate();
        items
            .map(|(i, v)| item(v, &format!("{key}[{i}]")))
            .collect()
    }

    fn edge_type(
        &self,
        edges: &Map<String, Value>,
        name: &str,
        ntypes: &[String],
        chunks: Option<Vec<u64>>,
        count: u64,
        e: usize,
    ) -> Result<EdgeMeta> {
        let parts: Vec<&str> = name.split(':').collect();
        let key = format!("edge_type[{e}]");
        let [src, rel, dst] = parts[..] else {
            let m = format!("{} is not of the form src:rel:dst", quoted(name));
            return Err(self.err(key, m));
        };
        // Its parts may become file names (the ends are node types).
        self.name(&Value::from(rel), &key, false)?;
        let ntype = |t: &str| {
            ntypes.iter().position(|n| n == t).ok_or_else(|| {
                self.err(
                    &key,
                    format!(
                        "{} names node type {}, which node_type does not list",
                        quoted(name),
                        quoted(t)
                    ),
                )
            })
        };
        let (src, dst) = (ntype(src)?, ntype(dst)?);
        let entry_key = format!("edges.{}", safe(name));
        let entry = edges
            .get(name)
            .ok_or_else(|| self.err(&entry_key, "missing: every edge_type needs its files"))?;
        let (format, files) = self.files(entry, &entry_key, false)?;
        if let Some(c) = &chunks {
            if c.len() != files.len() {
                return Err(self.err(
                    format!("num_edges_per_chunk[{e}]"),
                    format!(
                        "lists {} chunks but {entry_key}.data has {} files",
                        c.len(),
                        files.len()
                    ),
                ));
            }
        }
        Ok(EdgeMeta {
            name: name.to_string(),
            src,
            rel: rel.to_string(),
            dst,
            format,
            files,
            chunks,
            count,
        })
    }

    /// `{format: {name, delimiter?}, data: [paths]}`; paths are relative to
    /// metadata.json's folder.
    fn files(&self, v: &Value, key: &str, feature: bool) -> Result<(FileFormat, Vec<PathBuf>)> {
        let obj = self.object(v, key)?;
        let fkey = format!("{key}.format");
        let fmt = self.object(
            self.key(obj, "format")
                .map_err(|_| self.err(&fkey, "missing"))?,
            &fkey,
        )?;
        let name = self.string(
            self.key(fmt, "name")
                .map_err(|_| self.err(&fkey, "missing name"))?,
            &fkey,
        )?;
        let format = match name {
            "csv" if !feature => FileFormat::Csv {
                delimiter: self.delimiter(fmt, &fkey)?,
            },
            "parquet" => FileFormat::Parquet,
            "numpy" => FileFormat::Numpy,
            other => {
                let expected = if feature {
                    "numpy or parquet"
                } else {
                    "csv, parquet or numpy"
                };
                return Err(self.err(
                    &fkey,
                    format!("unknown format {}; expected {expected}", quoted(other)),
                ));
            }
        };
        let dkey = format!("{key}.data");
        let data = obj
            .get("data")
            .ok_or_else(|| self.err(&dkey, "missing list of files"))?;
        let files = self.strings(data, &dkey)?;
        let files = files.iter().enumerate();
        let files = files.map(|(i, f)| self.place(f, &format!("{dkey}[{i}]")));
        Ok((format, files.collect::<Result<_>>()?))
    }

    /// Where listed file `f` is; unless the input may be anywhere, a path
    /// with `..`, an absolute path out of the folder or a symlink leading
    /// out of it is refused (the message does not repeat the path).
    fn place(&self, f: &str, key: &str) -> Result<PathBuf> {
        if store::is_object(self.path) {
            return store::place(self.dir, f, self.anywhere).map_err(|why| {
                let m = format!("{why}; expected a key below metadata.json's prefix");
                self.err(key, m)
            });
        }
        let path = self.dir.join(f);
        let Some(root) = &self.confined else {
            return Ok(path);
        };
        let refuse = |why: &str| {
            let m = format!(
                "{why}; expected a file in metadata.json's folder (or allow input outside \
                 it: --allow-input-outside)"
            );
            Err(self.err(key, m))
        };
        let rel = Path::new(f);
        if rel
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return refuse("the path contains \"..\"");
        }
        // DGL's chunk_graph.py writes absolute paths: fine when inside.
        let inside_lexically =
            !rel.is_absolute() || rel.starts_with(self.dir) || rel.starts_with(root);
        match path.canonicalize() {
            Ok(real) if real.starts_with(root) => Ok(path),
            Ok(_) if inside_lexically => {
                refuse("the path leads through a symlink out of the folder")
            }
            Ok(_) => refuse("an absolute path out of the folder"),
            // Missing: the reader names it when it needs it.
            Err(_) if inside_lexically => Ok(path),
            Err(_) => refuse("an absolute path out of the folder"),
        }
    }

    fn delimiter(&self, fmt: &Map<String, Value>, key: &str) -> Result<u8> {
        let Some(v) = fmt.get("delimiter") else {
            return Ok(b' ');
        };
        match self.string(v, key)?.as_bytes() {
            [d] if !matches!(d, b'\n' | b'\r' | b'0'..=b'9') => Ok(*d),
            _ => Err(self.err(
                format!("{key}.delimiter"),
                format!("expected one character, found {}", kind(v)),
            )),
        }
    }

    /// `node_data` / `edge_data`: per type index, its features.
    fn data(
        &self,
        root: &Map<String, Value>,
        key: &str,
        types: &[String],
        index: impl Fn(&str) -> Option<usize>,
    ) -> Result<Vec<Vec<DataMeta>>> {
        let mut out = vec![Vec::new(); types.len()];
        let Some(v) = root.get(key) else {
            return Ok(out);
        };
        if v.is_null() {
            return Ok(out);
        }
        for (tname, feats) in self.object(v, key)? {
            let tkey = format!("{key}.{}", safe(tname));
            let t = index(tname)
                .ok_or_else(|| self.err(&tkey, format!("unknown type {}", quoted(tname))))?;
            for (fname, entry) in self.object(feats, &tkey)? {
                let fkey = format!("{tkey}.{}", safe(fname));
                // Keyed without the name: a bad one is not repeated.
                let nkey = format!("{tkey}, a feature's name");
                self.name(&Value::from(fname.as_str()), &nkey, false)?;
                let (format, files) = self.files(entry, &fkey, true)?;
                out[t].push(DataMeta {
                    name: fname.clone(),
                    key: fkey,
                    format,
                    files,
                });
            }
        }
        Ok(out)
    }
}
