//! Shuffle and write, in one process (partition mode ParMETIS): from a
//! graph and its assignment to the partitions DGL 2.1.0 loads, every file
//! written natively (no Python). Ownership, ids and each part's arrays
//! come from [`crate::shuffle`]; parts are built and written in parallel.
//!
//! Nothing half-written looks complete ([`crate::output::files`]): every
//! part is staged, and only when all parts (including `graph.dgl`) are done
//! are they renamed into place and the JSON written. An error leaves no
//! `<graph>.json`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::assign::Assignment;
use crate::model::InputGraph;
use crate::output::files::{dir_bytes, prepare_out, Staging};
use crate::output::json::{part_dir, PartitionJson};
use crate::output::write_part;
use crate::shuffle::{build_partition, ids::IdMaps, owned_edges, part::inner_nodes};
use crate::{Error, Result};

/// Where and how to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputConfig {
    /// The folder that receives `<graph>.json` and `part<i>/`.
    pub out_dir: PathBuf,
    /// `graph_name` of the JSON (and its file name).
    pub graph_name: String,
    pub threads: usize,
    /// Also write `orig_nids.dgl` / `orig_eids.dgl` per part (DGL's
    /// `--save-orig-nids` / `--save-orig-eids`).
    pub save_orig_ids: bool,
}

/// One part's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartSummary {
    pub part: u32,
    pub inner_nodes: u64,
    pub halo_nodes: u64,
    /// Edges the part owns (all of its graph's edges).
    pub edges: u64,
    /// Bytes of the part's final files.
    pub bytes: u64,
    /// Building the part-local graph (ownership, ids, halo).
    pub build: Duration,
    /// Writing its feature files and graph.dgl.
    pub write: Duration,
}

/// Wall time of each stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Global id maps.
    pub ids: Duration,
    /// Building and writing every part.
    pub parts: Duration,
    /// Renames and the JSON.
    pub publish: Duration,
    pub total: Duration,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub json: PathBuf,
    pub parts: Vec<PartSummary>,
    pub bytes_written: u64,
    pub timings: Timings,
}

/// Writes the partitions of `graph` under `assignment` as DGL 2.1.0's
/// `load_partition` / `DistGraph` read them.
pub fn write_partitions(
    graph: &InputGraph,
    assignment: &Assignment,
    cfg: &OutputConfig,
) -> Result<Summary> {
    let start = Instant::now();
    validate(graph, cfg)?;
    let pool = pool(cfg.threads)?;
    let json_path = prepare_out(&cfg.out_dir, &cfg.graph_name)?;
    let staging = Staging::create(&cfg.out_dir, &cfg.graph_name)?;
    let t = Instant::now();
    let ids = pool.install(|| IdMaps::for_graph(graph, &assignment.parts, assignment.num_parts))?;
    let mut timings = Timings {
        ids: t.elapsed(),
        ..Default::default()
    };
    let t = Instant::now();
    let mut parts = run_parts(graph, &assignment.parts, &ids, cfg, &staging.dir)?;
    timings.parts = t.elapsed();
    let t = Instant::now();
    let doc = PartitionJson {
        graph_name: &cfg.graph_name,
        part_method: &assignment.algo_name,
        graph,
        ids: &ids,
    };
    let mut bytes = 0;
    for s in parts.iter_mut() {
        s.bytes = dir_bytes(&staging.dir.join(part_dir(s.part)))?;
        bytes += s.bytes;
    }
    let done: Vec<u32> = parts.iter().map(|s| s.part).collect();
    bytes += staging.publish(&cfg.out_dir, &done, &json_path, &doc.render())?;
    timings.publish = t.elapsed();
    timings.total = start.elapsed();
    Ok(Summary {
        json: json_path,
        parts,
        bytes_written: bytes,
        timings,
    })
}

/// Builds and writes every part: `min(threads, parts)` workers, each with a
/// rayon pool of its share of the threads, so at most that many parts are
/// in memory at once.
fn run_parts(
    g: &InputGraph,
    parts: &[u32],
    ids: &IdMaps,
    cfg: &OutputConfig,
    staging: &Path,
) -> Result<Vec<PartSummary>> {
    let workers = cfg.threads.max(1).min(ids.num_parts as usize);
    let per_worker = (cfg.threads.max(1) / workers).max(1);
    let (next, failed) = (AtomicU32::new(0), AtomicBool::new(false));
    let done = Mutex::new(Vec::new());
    let work = || -> Result<()> {
        let pool = pool(per_worker)?;
        loop {
            let p = next.fetch_add(1, Ordering::Relaxed);
            if p >= ids.num_parts || failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let r = pool.install(|| one_part(g, parts, ids, cfg, staging, p));
            let summary = r.inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
            done.lock().map_err(|_| poisoned())?.push(summary);
        }
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        handles.into_iter().try_for_each(|h| {
            h.join().map_err(|_| Error::Stage {
                stage: "shuffle",
                message: "a partition worker panicked".into(),
            })?
        })
    })?;
    let mut done = done.into_inner().map_err(|_| poisoned())?;
    done.sort_by_key(|s| s.part);
    Ok(done)
}

fn one_part(
    g: &InputGraph,
    parts: &[u32],
    ids: &IdMaps,
    cfg: &OutputConfig,
    staging: &Path,
    p: u32,
) -> Result<PartSummary> {
    let t = Instant::now();
    let inner = inner_nodes(ids, parts, p);
    let edges = owned_edges(g, parts, p);
    let part = build_partition(g, ids, p, inner, edges)?;
    let build = t.elapsed();
    write_part(g, &part, &staging.join(part_dir(p)), cfg.save_orig_ids)?;
    let summary = PartSummary {
        part: p,
        inner_nodes: part.num_inner(),
        halo_nodes: part.halo.len() as u64,
        edges: part.num_edges(),
        bytes: 0,
        build,
        write: t.elapsed() - build,
    };
    tracing::debug!(part = p, ?build, write = ?summary.write, "partition written");
    Ok(summary)
}

/// Names DGL splits on (`/` in feature keys, `:` in edge types) and counts
/// its dtypes cap (`_TYPE` int16 / int32) must be safe before any write.
fn validate(g: &InputGraph, cfg: &OutputConfig) -> Result<()> {
    validate_names(g, &cfg.graph_name)?;
    validate_tensors(g)
}

/// The graph name and the type names DGL splits on.
pub(crate) fn validate_names(g: &InputGraph, name: &str) -> Result<()> {
    let bad = |m: String| Err(Error::Config(m));
    crate::names::check_config("the graph name", name)?;
    if name.starts_with('.') {
        return bad("the graph name starts with '.'; expected a name of a visible file".into());
    }
    if g.ntypes.len() > i16::MAX as usize || g.etypes.len() > i32::MAX as usize {
        return bad("too many node or edge types for DGL's _TYPE dtypes".into());
    }
    let nodes = g.ntypes.iter().enumerate();
    let names = nodes.map(|(i, t)| (format!("node type {i}"), &t.name));
    let rels = g.etypes.iter().enumerate();
    let names = names.chain(rels.map(|(e, t)| (format!("edge type {e}'s relation"), &t.rel)));
    for (field, n) in names {
        crate::names::check_config(&field, n)?;
        if n.contains(':') {
            return bad(format!(
                "type name {n:?}: DGL needs a non-empty name without ':' or '/'"
            ));
        }
    }
    Ok(())
}

fn validate_tensors(g: &InputGraph) -> Result<()> {
    for (t, nt) in g.ntypes.iter().enumerate() {
        for (f, x) in &nt.data {
            check_tensor(
                &format!("node type {} feature {f}", g.ntypes[t].name),
                f,
                x,
                nt.count,
            )?;
        }
    }
    for (e, et) in g.etypes.iter().enumerate() {
        for (f, x) in &et.data {
            check_tensor(
                &format!("edge type {} feature {f}", g.canonical_etype(e)),
                f,
                x,
                et.count(),
            )?;
        }
    }
    Ok(())
}

fn check_tensor(what: &str, name: &str, x: &crate::model::Tensor, rows: u64) -> Result<()> {
    crate::names::check_config(what, name)?;
    let want = x.shape.iter().product::<u64>() * x.dtype.size() as u64;
    if x.shape.is_empty() || x.rows() != rows || x.data.len() as u64 != want {
        return Err(Error::Config(format!(
            "{what}: shape {:?} with {} bytes, expected {rows} rows",
            x.shape,
            x.data.len()
        )));
    }
    Ok(())
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| Error::Stage {
            stage: "shuffle",
            message: format!("thread pool: {e}"),
        })
}

fn poisoned() -> Error {
    Error::Stage {
        stage: "shuffle",
        message: "a partition worker panicked".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EdgeType, NodeType};

    fn tiny() -> (InputGraph, Assignment) {
        let n = NodeType {
            name: "_N".into(),
            count: 4,
            ..Default::default()
        };
        let e = EdgeType {
            rel: "_E".into(),
            src: vec![0, 1, 2, 3],
            dst: vec![1, 2, 3, 0],
            ..Default::default()
        };
        let g = InputGraph {
            name: "g".into(),
            ntypes: vec![n],
            etypes: vec![e],
        };
        let a = Assignment {
            num_parts: 2,
            parts: vec![0, 1, 0, 1],
            algo_name: "random".into(),
        };
        (g, a)
    }

    fn cfg(out: &Path) -> OutputConfig {
        OutputConfig {
            out_dir: out.to_path_buf(),
            graph_name: "g".into(),
            threads: 2,
            save_orig_ids: false,
        }
    }

    #[test]
    fn every_part_is_published_with_its_graph() {
        let dir = tempfile::tempdir().unwrap();
        let (g, a) = tiny();
        let s = write_partitions(&g, &a, &cfg(dir.path())).unwrap();
        assert_eq!(s.json, dir.path().join("g.json"));
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["g.json", "part0", "part1"], "no staging left");
        for p in ["part0", "part1"] {
            let mut files: Vec<String> = std::fs::read_dir(dir.path().join(p))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            assert_eq!(files, ["edge_feat.dgl", "graph.dgl", "node_feat.dgl"]);
        }
        assert_eq!(s.parts.iter().map(|p| p.edges).sum::<u64>(), 4);
        assert!(s.parts.iter().all(|p| p.bytes > 4096), "{:?}", s.parts);
    }

    #[test]
    fn a_failed_run_leaves_no_json_and_no_staging() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("g.json"), "{}").unwrap();
        let (mut g, a) = tiny();
        g.etypes[0].dst[2] = 9;
        let err = write_partitions(&g, &a, &cfg(dir.path())).unwrap_err();
        assert!(err.to_string().contains('9'), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(
            left.is_empty(),
            "the stale JSON and the staging folder are gone: {left:?}"
        );
    }

    #[test]
    fn names_dgl_would_split_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut g, a) = tiny();
        g.ntypes[0].name = "a:b".into();
        let err = write_partitions(&g, &a, &cfg(dir.path())).unwrap_err();
        assert!(
            matches!(err, Error::Config(ref m) if m.contains("\"a:b\"")),
            "{err}"
        );
        let (g, a) = tiny();
        let mut c = cfg(dir.path());
        c.graph_name = "../x".into();
        assert!(matches!(
            write_partitions(&g, &a, &c),
            Err(Error::Config(_))
        ));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
